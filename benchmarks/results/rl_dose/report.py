"""Evaluation accuracy against PARA-GRPO step, for runs that evaluated on the same validation episodes.

    python benchmarks/results/rl_dose/report.py --out benchmarks/results/rl_dose/rl_dose \\
        gpu=benchmarks/results/rl_dose/call2 cpu=runs/rl_dose

Each LABEL=FOLDER names a folder of run folders (each with history.json and args.json, as trainers/para_grpo.py
writes them). Writes OUT.json, OUT.md (every evaluation of every run, per family, beside the no-tool scripted agent on
the same episodes) and OUT.png (accuracy against step, a line per run, the no-tool agent's as a dashed line)."""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from default_run_seeds import FAMILIES, eval_env_settings, no_tool_accuracy, pick  # noqa: E402


def load_runs(label: str, folder: Path) -> list[dict]:
    runs = []
    for hist in sorted(folder.glob("*/history.json")):
        args = json.loads((hist.parent / "args.json").read_text())
        evals = [{"step": h["step"], **pick(h)} for h in json.loads(hist.read_text()) if "eval/accuracy" in h]
        no_tool = no_tool_accuracy(args["eval_first_episode"], args["eval_episodes"], eval_env_settings(args))
        runs.append({"where": label, "run": hist.parent.name, "learning_rate": args["learning_rate"],
                     "prompts_per_step": args["prompts_per_step"], "device": args["device"],
                     "eval_episodes": args["eval_episodes"], "evals": evals, "no_tool": no_tool})
    return runs


def markdown(runs: list[dict]) -> str:
    lines = ["| where | run | lr | prompts x G | step | accuracy | common format | executed calls | "
             + " | ".join(FAMILIES) + " |", "|---" * (8 + len(FAMILIES)) + "|"]
    for r in runs:
        for e in r["evals"]:
            lines.append(f"| {r['where']} | {r['run']} | {r['learning_rate']:g} | {r['prompts_per_step']} x 8 | "
                         f"{e['step']} | {e['accuracy']:.3f} | {e.get('format_reward_common', float('nan')):.3f} | "
                         f"{e.get('tool_calls_per_rollout', float('nan')):.2f} | "
                         + " | ".join(f"{e.get(f'accuracy/{f}', float('nan')):.2f}" for f in FAMILIES) + " |")
    base = {json.dumps(r["no_tool"], sort_keys=True) for r in runs}
    for b in map(json.loads, sorted(base)):
        lines.append("| | no-tool scripted agent | | | | " + f"{b['accuracy']:.3f} | | | "
                     + " | ".join(f"{b.get(f'accuracy/{f}', float('nan')):.2f}" for f in FAMILIES) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours, seen = {}, {}
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        c = colours.setdefault(r["where"], f"C{len(colours)}")
        k = seen[r["where"]] = seen.get(r["where"], -1) + 1  # a marker per run within a colour
        steps = [e["step"] for e in r["evals"]]
        ax.plot(steps, [e["accuracy"] for e in r["evals"]], "-" + "osD^vP"[k % 6], color=c, alpha=0.7, markersize=4,
                label=f"{r['where']}: {r['run']}")
    for b in {r["no_tool"]["accuracy"] for r in runs}:
        ax.axhline(b, color="tab:red", ls="--", label="no-tool scripted agent")
    ax.set_xlabel("PARA-GRPO step (16 rollouts a step unless the run says otherwise)")
    ax.set_ylabel(f"eval accuracy ({runs[0]['eval_episodes']} episodes, T = 0.6)")
    ax.legend(fontsize=7, loc="lower left", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="LABEL=FOLDER of run folders")
    p.add_argument("--out", required=True, help="writes OUT.json, OUT.md and OUT.png")
    a = p.parse_args(argv)
    runs = []
    for spec in a.folders:
        label, _, folder = spec.partition("=")
        if not folder:
            raise SystemExit(f"expected LABEL=FOLDER, got {spec!r}")
        runs += load_runs(label, Path(folder))
    if not runs:
        raise SystemExit("no run folder with a history.json found")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(runs))
    plot(runs, out.with_suffix(".png"))
    print(markdown(runs))


if __name__ == "__main__":
    main()
