"""A short PARA-GRPO run with sample rollouts, its HTML pages, a Chromium screenshot, and what the
samples cost each evaluation.

    python benchmarks/viewer_demo.py                          # writes runs/benchmarks/viewer_demo*
    python benchmarks/viewer_demo.py --out benchmarks/results # refreshes the committed results

Trains the shipped strong cold start (--subagent oracle, so crop summaries are the world's truthful
captions) for --total-steps steps, evaluating every --eval-every; writes runs/viewer_demo/ (open
runs/viewer_demo/samples/index.html), OUT/viewer.png (in headless Chromium, the page of the
sample that ran the most crops), OUT/viewer.json and OUT/viewer.md. The cost is measured inside the run: the wall time
of each evaluation, and of capturing and writing its samples (disk + TensorBoard).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and not __package__:  # python benchmarks/viewer_demo.py: the repo root on the path
    sys.path.insert(0, str(ROOT))

from trainers import core, para_grpo, samples, view  # noqa: E402


def timed(module, name: str, bucket: list):
    """Wrap module.name so each call's wall time lands in bucket (the trainer looks it up per call)."""
    inner = getattr(module, name)

    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            bucket.append(time.perf_counter() - t)

    setattr(module, name, wrapper)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/benchmarks", help="output folder (untracked by default; --out benchmarks/results refreshes the committed results)")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--total-steps", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--eval-episodes", type=int, default=4)
    p.add_argument("--eval-samples", type=int, default=4)
    p.add_argument("--gating-budgets", default="4", help="K values (at K = 4 the overview rarely shows the "
                   "needle and the shipped model writes more crop calls: more to look at)")
    p.add_argument("--window", default="1200x1500", help="screenshot WIDTHxHEIGHT")
    a = p.parse_args(argv)
    evals, captures, writes = [], [], []
    timed(core, "evaluate", evals)
    timed(samples, "capture", captures)
    timed(samples, "write_samples", writes)
    run = Path(a.runs_dir) / "viewer_demo"
    t0 = time.perf_counter()
    para_grpo.main(["--runs-dir", a.runs_dir, "--run-name", "viewer_demo", "--total-steps", str(a.total_steps),
                    "--eval-every", str(a.eval_every), "--eval-episodes", str(a.eval_episodes), "--eval-samples", str(a.eval_samples),
                    "--gating-budgets", a.gating_budgets, "--subagent", "oracle", "--checkpoint-every", "0",
                    "--no-progress"])
    train_s = time.perf_counter() - t0
    index, pages = view.build(run)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in a.window.split("x"))
    # the sample that ran the most crops (the latest among equals): the most to look at
    best = max(((int(r.get("num_tool_calls", 0)), k, j) for k, pg in enumerate(pages)
                for j, r in enumerate(samples.read_step(pg.parent)["samples"])))
    shown = pages[best[1]].parent / view.sample_page_name(best[2])
    shot = view.screenshot(shown, out / "viewer.png", w, h)
    step_bytes = [sum(f.stat().st_size for f in pg.parent.iterdir() if f.name != "index.html") for pg in pages]
    n_eval = len(writes)
    per_eval_capture = sum(captures) / max(n_eval, 1)
    result = {
        "command": "python benchmarks/viewer_demo.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "run": str(run), "total_steps": a.total_steps, "eval_every": a.eval_every, "eval_samples": a.eval_samples,
        "evaluations": n_eval, "train_seconds": train_s,
        "eval_seconds_mean": sum(evals) / max(len(evals), 1),
        "capture_seconds_per_eval": per_eval_capture,
        "write_seconds_per_eval": sum(writes) / max(n_eval, 1),
        "disk_bytes_per_step": sum(step_bytes) / max(len(step_bytes), 1),
        "screenshot_page": str(shown.relative_to(run)), "screenshot_crops": best[0],
        "screenshot": str(shot.relative_to(ROOT)) if shot.is_relative_to(ROOT) else str(shot),
        "cpu_count": os.cpu_count(), "load_average": os.getloadavg()[0],
    }
    (out / "viewer.json").write_text(json.dumps(result, indent=1))
    md = ("| measurement | value |\n|---|---|\n"
          f"| evaluations ({a.eval_episodes} validation episodes each), samples kept per evaluation | "
          f"{n_eval}, {a.eval_samples} |\n"
          f"| evaluation wall time, mean | {result['eval_seconds_mean']:.2f} s |\n"
          f"| of which capturing the samples (records, re-cut crops, pictures) | {per_eval_capture:.3f} s |\n"
          f"| then writing them (PNGs + records.json + TensorBoard text and images) | "
          f"{result['write_seconds_per_eval']:.3f} s |\n"
          f"| disk per evaluation step | {result['disk_bytes_per_step'] / 1024:.0f} KiB |\n"
          f"| whole run ({a.total_steps} steps) | {train_s:.0f} s |\n\n"
          f"{os.cpu_count()}-core CPU, load average {result['load_average']:.1f} at the end.\n")
    (out / "viewer.md").write_text(md)
    print(md)
    print(f"pages: {index}\nscreenshot: {shot} of {shown} ({best[0]} crop(s) executed)")


if __name__ == "__main__":
    main()
