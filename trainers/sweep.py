"""The ablation sweep of PAPER.md's table: one PARA-GRPO run per row, same seed and schedule.

    python trainers/sweep.py --rows grpo,full --total-steps 30          # any extra flag goes to every run
    python trainers/sweep.py --model path/to/cold_start --device cuda --total-steps 100

Rows (each differs from PARA-GRPO's defaults only in the flags shown):

================  ================================================================================
grpo              all mechanisms off, K = 64 (the "+ SFT + GRPO" row)
anchoring         think prefix, answer suffix, anchor bonus, penalty; K = 64 (no gating)
gating            nFrames gating only
full              PARA-GRPO
no_tool_reward    full minus R_tool
no_gamma          full minus the penalty gamma
logprob_anchor    full, with the paper's log-prob anchoring instead of the sequence bonus
sequential        full, sequential dispatch (one crop per turn)
================  ================================================================================

Writes ``<out>/sweep.json``, ``<out>/sweep.md`` (f_tau = mean ``train/format_reward_common``, the
released PARA-GRPO format applied to every row's rollouts, so rows trained on different rewards
compare; the row's own ``train/format_reward`` beside it; kappa = mean
``train/tool_calls_per_rollout``, executed calls, over the last quarter of steps; eval numbers at the end)
and ``<out>/sweep.png`` (format reward and tool calls per step, one curve per row). Each run's
TensorBoard folder is ``runs/sweep_<row>__s<seed>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers import para_grpo  # noqa: E402

# R_tool stays on in every row but "no_tool_reward": the released code adds it everywhere.
VANILLA = ["--no-think-prefix", "--no-answer-suffix", "--anchor-lambda", "0", "--penalty-gamma", "0"]
ROWS: dict[str, list[str]] = {
    "grpo": VANILLA + ["--no-nframes-gating", "--frame-budget", "64"],
    "anchoring": ["--no-nframes-gating", "--frame-budget", "64"],
    "gating": VANILLA + ["--nframes-gating"],
    "full": [],
    "no_tool_reward": ["--no-tool-reward"],
    "no_gamma": ["--penalty-gamma", "0"],
    "logprob_anchor": ["--anchor-mode", "logprob", "--anchor-lambda", "0.1"],
    "sequential": ["--dispatch", "sequential", "--max-calls-per-turn", "1"],
}


def summarize(history: list[dict]) -> dict:
    steps = [h for h in history if h.get("step", 0) > 0 and "train/format_reward_common" in h]
    tail = steps[-max(1, len(steps) // 4):] if steps else []

    def mean(key, rows):
        vals = [r[key] for r in rows if key in r]
        return sum(vals) / len(vals) if vals else float("nan")

    evals = [h for h in history if "eval/accuracy" in h]
    last_eval = evals[-1] if evals else {}
    return {"steps": len(steps), "f_tau": mean("train/format_reward_common", tail),
            "f_own": mean("train/format_reward", tail), "kappa": mean("train/tool_calls_per_rollout", tail),
            "kappa_emitted": mean("train/tool_calls_emitted_per_rollout", tail),
            "parallel_turn_fraction": mean("train/parallel_turn_fraction", tail),
            "train_accuracy": mean("train/accuracy", tail),
            "eval_accuracy": last_eval.get("eval/accuracy", float("nan")),
            "eval_format_reward": last_eval.get("eval/format_reward_common", float("nan")),
            "eval_tool_calls_per_rollout": last_eval.get("eval/tool_calls_per_rollout", float("nan")),
            "seconds_per_step": mean("perf/step_seconds", steps)}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for row, r in results.items():
        steps = [h for h in r["history"] if "train/format_reward_common" in h]
        xs = [h["step"] for h in steps]
        axes[0].plot(xs, [h["train/format_reward_common"] for h in steps], label=row)
        axes[1].plot(xs, [h["train/tool_calls_per_rollout"] for h in steps], label=row)
    axes[0].set(title="common format reward at training temperature (f_tau)", xlabel="step")
    axes[1].set(title="executed tool calls per rollout (kappa)", xlabel="step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Unknown flags are passed to every run.")
    p.add_argument("--rows", default="grpo,anchoring,gating,full,no_tool_reward,no_gamma",
                   help=f"comma list from {', '.join(ROWS)}")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/sweep")
    a, extra = p.parse_known_args(argv)
    rows = [r for r in a.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; known: {list(ROWS)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for row in rows:
        argv_row = ROWS[row] + ["--seed", str(a.seed), "--exp-name", f"sweep_{row}"] + extra
        print(f"== {row}: {' '.join(argv_row)}", flush=True)
        history = para_grpo.main(argv_row)
        results[row] = {"flags": argv_row, **summarize(history), "history": history}
        (out / "sweep.json").write_text(json.dumps(results, indent=1))
    lines = ["| row | f_tau | own format | kappa | emitted | parallel turns | train acc | eval acc | eval format | "
             "eval kappa | s/step |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row, r in results.items():
        lines.append(f"| {row} | {r['f_tau']:.3f} | {r['f_own']:.3f} | {r['kappa']:.3f} | {r['kappa_emitted']:.3f} | "
                     f"{r['parallel_turn_fraction']:.2f} | {r['train_accuracy']:.3f} | "
                     f"{r['eval_accuracy']:.3f} | {r['eval_format_reward']:.3f} | "
                     f"{r['eval_tool_calls_per_rollout']:.3f} | {r['seconds_per_step']:.1f} |")
    (out / "sweep.md").write_text("\n".join(lines) + "\n")
    plot(results, out / "sweep.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
