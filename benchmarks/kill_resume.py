"""Kill a training run at arbitrary instants, resume it, and compare with the uninterrupted run.

    python benchmarks/kill_resume.py --random-kills 8 --out benchmarks/results

What it does, as a new user with a job scheduler would: one uninterrupted reference run of
trainers/para_grpo.py (the shipped tiny strong-prior model, 6 steps of 1 prompt x 2 rollouts, a
checkpoint every 2 steps); then trials, each in a fresh folder, that start the same run and SIGKILL
it either on a file event in the run folder, seen by polling the folder every ~0.5 ms (a
checkpoint's temp file appears, a checkpoint appears, history.json's or latest's temp file appears,
final_model's staging folder appears, final_model appears), or at a random instant (seeded) after
the run opened its folder (args.json appeared), drawn over the reference run's time from that
moment to its end. Then the same command with ``--resume`` runs once, and the trial checks: exit 0;
final_model weights bit-identical to the reference; history.json's metrics (all but timings)
identical; every TensorBoard step exactly once; no temp files left. An event the poller never saw
(a file that lived for less than a poll) is reported as missed; such a trial kills nothing and
still checks the resume of a finished run.

Writes ``<out>/kill_resume.json`` and ``<out>/kill_resume.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "agents" / "lmm" / "checkpoints" / "tiny-strong" / "cold_start"
STEPS = 6
ARGS = ["--model", str(MODEL), "--total-steps", str(STEPS), "--checkpoint-every", "2", "--prompts-per-step", "1",
        "--group-size", "2", "--max-new-tokens", "8", "--subagent-max-new-tokens", "6", "--max-turns", "2",
        "--eval-every", "0", "--subagent", "oracle", "--dataset-size", "60", "--no-progress", "--run-name", "run"]
# (label, regex on a path relative to the run folder)
EVENTS = [
    ("checkpoint temp file appears", r"checkpoints/\.step_\d+\.pt\.tmp-"),
    ("step_000004.pt appears", r"checkpoints/step_000004\.pt$"),
    ("history.json temp file appears", r"\.history\.json\.tmp-"),
    ("latest temp file appears", r"checkpoints/\.latest\.tmp-"),
    ("final_model staging folder appears", r"\.final_model\.tmp-"),
    ("final_model appears", r"final_model$"),
]


def command(runs: Path, *extra: str) -> list[str]:
    return [sys.executable, "trainers/para_grpo.py", *ARGS, "--runs-dir", str(runs), *extra]


def listing(run: Path) -> list[str]:
    out = []
    for folder in (run, run / "checkpoints"):
        try:
            with os.scandir(folder) as it:
                out += [str(Path(e.path).relative_to(run)) for e in it]
        except FileNotFoundError:
            pass
    return out


def run_killed(runs: Path, event: str | None = None, delay: float | None = None) -> dict:
    """Start the run; SIGKILL it on the first path matching `event`, or `delay` seconds after the run
    opened its folder (args.json appeared: lock taken, model about to load); neither: let it finish."""
    p = subprocess.Popen(command(runs), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, run, pattern = time.perf_counter(), runs / "run", re.compile(event) if event else None
    seen, opened = None, None
    while p.poll() is None:
        names = listing(run)
        now = time.perf_counter()
        if opened is None and "args.json" in names:
            opened = now
        if delay is not None and opened is not None and now - opened >= delay:
            seen = f"{now - opened:.2f} s after the folder opened"
        elif pattern is not None:
            seen = next((name for name in names if pattern.search(name)), None)
        if seen:
            p.send_signal(signal.SIGKILL)
            break
        time.sleep(0.0005)
    rc = p.wait()
    end = time.perf_counter()
    return {"rc": rc, "killed": rc == -signal.SIGKILL, "at": seen, "seconds": round(end - t0, 2),
            "open_seconds": round(end - opened, 2) if opened else None, "left": sorted(listing(run))}


def tb_steps(run: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    return [e.step for e in acc.Scalars("train/reward")]


def compare(run: Path, ref: Path) -> dict:
    from safetensors.torch import load_file

    def metrics(path):
        return [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in json.loads(path.read_text())]

    out = {"history_identical": False, "weights_identical": False, "tensorboard_steps_once": False, "leftovers": []}
    try:
        out["history_identical"] = metrics(run / "history.json") == metrics(ref / "history.json")
        a, b = load_file(str(run / "final_model" / "model.safetensors")), load_file(str(ref / "final_model" / "model.safetensors"))
        out["weights_identical"] = a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
        out["tensorboard_steps_once"] = tb_steps(run) == list(range(1, STEPS + 1))
    except (OSError, ValueError, KeyError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["leftovers"] = [n for n in listing(run) if Path(n).name.startswith(".")]
    return out


def markdown(rows: list[dict], ok: list[bool]) -> list[str]:
    lines = ["| kill trigger | killed | state left (checkpoints, final_model) | resumed from | weights, history, TB identical |",
             "|---|---|---|---|---|"]
    for r, good in zip(rows, ok):
        ck = [n.split("/")[-1].replace(".pt", "") for n in r["left"] if re.match(r"checkpoints/step_\d+\.pt$", n)]
        fm = "final_model" if "final_model" in r["left"] else "no final_model"
        frm = next((m.group(1) for s in r["resume_said"] if (m := re.search(r"from (step_\d+)\.pt", s))),
                   "step 0" if any("starting from step 0" in s for s in r["resume_said"]) else "-")
        lines.append(f"| {r['trigger']} | {'yes' if r['killed'] else 'no: it finished first'} | "
                     f"{', '.join(sorted(ck)) or 'none'}; {fm} | {frm} | {'yes' if good else 'NO'} |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--random-kills", type=int, default=8, help="trials killed at a random instant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="kill_resume_"))
    rows = []
    try:
        ref = run_killed(work / "reference")
        if ref["rc"] != 0:
            raise SystemExit(f"the reference run failed (exit {ref['rc']}): {command(work / 'reference')}")
        ref_seconds = ref["open_seconds"]  # folder opened -> exit: the span random kills are drawn from
        trials = [(label, ev, None) for label, ev in EVENTS]
        trials += [(None, None, round(rng.uniform(0.0, ref_seconds), 2)) for _ in range(a.random_kills)]
        for i, (label, event, delay) in enumerate(trials):
            runs = work / f"trial{i}"
            kill = run_killed(runs, event, delay)
            resume = subprocess.run(command(runs, "--resume"), cwd=ROOT, capture_output=True, text=True)
            said = [ln for ln in resume.stderr.splitlines() if ln.startswith("--resume")]
            row = {"trigger": label or f"{delay:.2f} s after the folder opened", **kill, "resume_rc": resume.returncode,
                   "resume_said": said, **compare(runs / "run", work / "reference" / "run")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = [r["resume_rc"] == 0 and r["weights_identical"] and r["history_identical"] and r["tensorboard_steps_once"]
          and not r["leftovers"] for r in rows]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kill_resume.json").write_text(json.dumps({"reference_open_seconds": ref_seconds, "steps": STEPS,
                                                      "trials": rows, "all_ok": all(ok)}, indent=1))
    lines = markdown(rows, ok)
    (out / "kill_resume.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"{sum(ok)}/{len(ok)} trials resumed bit-identically")


if __name__ == "__main__":
    main()
