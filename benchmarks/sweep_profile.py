"""Where a reproduction sweep's time goes: paper-preset training steps with N runs sharing one machine.

Starts N trainer processes side by side (the paper preset's step: 4 prompts x G = 8 at T = 0.7, K drawn from
{4, ..., 64}, PARA-GRPO) for a few steps each, for every N of --concurrency, then one protocol evaluation of the
starting model (trainers/evaluation.py: the tools and no-tools conditions), then every N of --mps-concurrency
with NVIDIA's multi-process service started (without it a GPU runs one process's kernels at a time). Reports
per N the mean seconds of a step and of its parts (the main agent's generation, the sub-agents' generation, env
work, the update), the steps per minute of all runs together, and what the best rate makes of the paper preset's
training (14 rows x 3 seeds x 40 steps).

    python benchmarks/sweep_profile.py --device cuda --rollout-backend hf-graph --concurrency 1,12 \\
        --mps-concurrency 12,20 --steps 3 --out benchmarks/results/gpu/sweep_profile
    python benchmarks/sweep_profile.py --device cpu --concurrency 1,2 --steps 2 --eval-episodes 16

Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and not __package__:  # python benchmarks/sweep_profile.py: the repo root on the path
    sys.path.insert(0, str(ROOT))

from benchmarks.report import write_report  # noqa: E402

PAPER_RUN_STEPS = 14 * 3 * 40  # the paper preset: rows x seeds x steps
PARTS = ("generate_main", "generate_sub", "env", "backward")


def profile(n: int, steps: int, device: str, backend: str, work: Path, timeout: float) -> dict:
    """N trainer processes side by side, `steps` steps each; the per-step records of every run."""
    runs = work / f"n{n}"
    flags = ["--device", device, "--rollout-backend", backend, "--prompts-per-step", "4", "--gating-budgets",
             "4,8,16,32,64", "--eval-every", "0", "--checkpoint-every", "1", "--total-steps", str(steps),
             "--runs-dir", str(runs), "--no-progress"]
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "trainers" / "para_grpo.py"), *flags, "--seed", str(i + 1)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT) for i in range(n)]
    errors = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1.0, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        if p.returncode:
            errors.append(err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {p.returncode}"])
    wall = time.time() - t0
    records = []
    for f in sorted(runs.glob("*/history.json")):
        records += [h for h in json.loads(f.read_text()) if h.get("step", 0) > 0]
    # the first step of a run holds its compile and warm-up: it is reported, not averaged
    steady = [h for h in records if h["step"] > 1] or records

    def mean(key):
        vals = [h[key] for h in steady if key in h]
        return fmean(vals) if vals else float("nan")

    step_s = mean("perf/step_seconds")
    out = {"runs": n, "steps_done": len(records), "wall_s": wall, "step_s": step_s,
           "first_step_s": fmean([h["perf/step_seconds"] for h in records if h["step"] == 1] or [float("nan")]),
           "steps_per_min_all_runs": 60.0 * n / step_s if step_s == step_s else float("nan"),
           "errors": [e[0] for e in errors]}
    out.update({f"{p}_s": mean(f"perf/{p}_seconds") for p in PARTS})
    out["tool_calls_per_rollout"] = mean("train/tool_calls_per_rollout")
    return out


def eval_seconds(device: str, episodes: int, work: Path, timeout: float) -> dict:
    """One protocol evaluation of the shipped strong cold start (tools and no-tools conditions)."""
    import dataclasses

    from trainers.config import GRPOArgs, parse_args
    from trainers.run_state import atomic_write_json

    args_file = work / "eval_args.json"
    atomic_write_json(args_file, dataclasses.asdict(parse_args(GRPOArgs, ["--device", device])))
    t0 = time.time()
    p = subprocess.run([sys.executable, str(ROOT / "trainers" / "evaluation.py"), "--args", str(args_file),
                        "--steps", "0", "--conditions", "tools,no_tools", "--episodes", str(episodes),
                        "--out-dir", str(work / "eval"), "--device", device],
                       cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    record = work / "eval" / "step_000000.json"
    conds = json.loads(record.read_text())["conditions"] if record.is_file() else {}
    return {"episodes": episodes, "wall_s": time.time() - t0, "ok": p.returncode == 0,
            **{f"{c}_s": v["seconds"] for c, v in conds.items()}}


def start_mps() -> bool:
    """Start NVIDIA's multi-process service (kernels of several processes run on the GPU together)."""
    try:
        return subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def stop_mps() -> None:
    subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", capture_output=True, timeout=30)


def markdown(result: dict) -> str:
    lines = ["| MPS | runs side by side | s/step | main gen s | sub gen s | env s | update s | first step s | "
             "steps/min (all runs) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["levels"]:
        lines.append(f"| {'on' if r.get('mps') else 'off'} | {r['runs']} | {r['step_s']:.2f} | "
                     f"{r['generate_main_s']:.2f} | {r['generate_sub_s']:.2f} | {r['env_s']:.2f} | "
                     f"{r['backward_s']:.2f} | {r['first_step_s']:.1f} | {r['steps_per_min_all_runs']:.1f} |")
    ev, est = result["evaluation"], result["paper_preset_estimate"]
    if ev:
        lines += ["", f"One protocol evaluation of the starting model ({ev['episodes']} episodes, tools and no tools, "
                      f"alone on the GPU): {ev['wall_s']:.0f} s."]
    if est:
        lines += [f"At the best rate ({est['at_runs']} runs side by side, MPS {'on' if est['mps'] else 'off'}), the "
                  f"paper preset's training ({PAPER_RUN_STEPS} run-steps) takes about {est['training_min']:.0f} min."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--rollout-backend", default="hf-graph")
    p.add_argument("--concurrency", default="1,6,12", help="comma list of runs side by side")
    p.add_argument("--mps-concurrency", default="", help="then these, with NVIDIA MPS started for them (and stopped "
                                                        "after); empty: none")
    p.add_argument("--steps", type=int, default=5, help="steps per run")
    p.add_argument("--timeout-s", type=float, default=240, help="per concurrency level")
    p.add_argument("--eval-episodes", type=int, default=256, help="0: no evaluation timing")
    p.add_argument("--out", default="runs/benchmarks/sweep_profile")
    a = p.parse_args(argv)
    levels = [int(x) for x in a.concurrency.split(",") if x]
    mps_levels = [int(x) for x in a.mps_concurrency.split(",") if x]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [{"mps": False, **profile(n, a.steps, a.device, a.rollout_backend, work / "plain", a.timeout_s)}
                for n in levels]
        ev = eval_seconds(a.device, a.eval_episodes, work, a.timeout_s) if a.eval_episodes else {}
        if mps_levels:
            if not start_mps():
                p.error("--mps-concurrency: nvidia-cuda-mps-control -d failed (no NVIDIA driver tools, or no rights)")
            try:
                rows += [{"mps": True, **profile(n, a.steps, a.device, a.rollout_backend, work / "mps", a.timeout_s)}
                         for n in mps_levels]
            finally:
                stop_mps()
    best = max((r for r in rows if r["steps_per_min_all_runs"] == r["steps_per_min_all_runs"]),
               key=lambda r: r["steps_per_min_all_runs"], default=None)
    est = {"at_runs": best["runs"], "mps": best["mps"],
           "training_min": PAPER_RUN_STEPS / best["steps_per_min_all_runs"]} if best else {}
    result = {"device": a.device, "rollout_backend": a.rollout_backend, "steps_per_run": a.steps, "levels": rows,
              "evaluation": ev, "paper_preset_estimate": est,
              "command": "python benchmarks/sweep_profile.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_report(a.out, result, markdown(result))


if __name__ == "__main__":
    main()
