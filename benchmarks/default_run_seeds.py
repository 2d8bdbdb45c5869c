"""The default PARA-GRPO run on several seeds and settings, each evaluated before and after on many episodes.

    python benchmarks/default_run_seeds.py --seeds 1,2,3 --jobs 2            # the default run, three seeds
    python benchmarks/default_run_seeds.py --configs "default:|lr3e-4:--learning-rate 3e-4" --seeds 1,2 \\
        --eval-episodes 160 --eval-first-episode 1000 --jobs 14 --out runs/benchmarks/default_run_seeds

One 24-episode evaluation cannot tell whether a run raised accuracy (one episode is 0.042). This runs
`trainers/para_grpo.py` once per (setting, seed), side by side in --jobs processes of one torch thread
each, evaluating every run before and after training (only) on the same --eval-episodes validation episodes
(from --eval-first-episode: choose settings on episodes the reported evaluation does not use). The
no-tool scripted agent plays the same episodes, in the environment each run evaluated in (its args.json:
world, K, frame size), once per guess seed (`no_tool_accuracy`: one draw and the average). Writes OUT.json and OUT.md (per run and per setting:
accuracy before -> after with per-family accuracy, format, executed calls) and OUT.png (before -> after
per run, against the no-tool agent).
"""

import argparse
import functools
import json
import math
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from statistics import fmean, pstdev, stdev

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and not __package__:  # python benchmarks/default_run_seeds.py: the repo root on the path
    sys.path.insert(0, str(ROOT))

from tqdm import tqdm  # noqa: E402

FAMILIES = ("counting", "global", "grounding", "needle", "needle_attribute", "temporal_order")


def parse_configs(text: str) -> list[tuple[str, list[str]]]:
    """'name:flags|name:flags' -> [(name, [flag, ...])]; an empty flags part is the default run."""
    out = []
    for spec in filter(None, (s.strip() for s in text.split("|"))):
        name, _, flags = spec.partition(":")
        if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise SystemExit(f"--configs: a setting needs a plain name before ':', got {spec!r}")
        out.append((name, shlex.split(flags)))
    if len({n for n, _ in out}) != len(out):
        raise SystemExit("--configs: setting names must be unique")
    return out


GUESS_SEEDS = 32


def parse_seeds(text: str) -> list[int]:
    """"1,2,3" or ranges "1-3,7" -> [1, 2, 3] / [1, 2, 3, 7]."""
    seeds = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
        except ValueError:
            raise SystemExit(f"--seeds: expected integers or ranges like 1-3, got {part!r}") from None
    if not seeds:
        raise SystemExit(f"--seeds: no seed in {text!r}")
    return seeds


@functools.lru_cache(maxsize=None)
def no_tool_accuracy(first: int, episodes: int, env_settings: tuple) -> dict:
    """The no-tool scripted agent on the episodes the trainer evaluated (episode i: seed 10000 + i), in the
    environment its run evaluated in, counted as the trainer counts (share answered right).

    Where the overview does not show the evidence the agent guesses, so one evaluation is one draw of its guesses:
    "accuracy" is the draw with guess seed 10000 (what this file reported before), "accuracy_expected" the mean
    over GUESS_SEEDS guess seeds (what the agent scores on these episodes on average) and "accuracy_sd" their spread;
    "expected_per_episode" is each episode's share of those seeds answered right, in episode order."""
    from agents.evaluate import evaluate

    draws = [evaluate("no_tool", episodes, 10_000, first, agent_seed=10_000 + g, **dict(env_settings))
             for g in range(GUESS_SEEDS)]
    shares = [d["correct"] for d in draws]
    per_episode = [fmean(d["correct_per_episode"][i] for d in draws) for i in range(episodes)]
    return {"accuracy": shares[0], "accuracy_expected": fmean(shares), "accuracy_sd": pstdev(shares),
            **{f"accuracy/{f}": v for f, v in draws[0]["correct_per_family"].items()},
            "expected_per_episode": per_episode, "family_per_episode": draws[0]["family_per_episode"]}


def eval_env_settings(run_args: dict) -> tuple:
    """What of a run's arguments (its args.json) decides its evaluation episodes: world, split or question
    file, and the overview's K."""
    source = run_args.get("eval_source") or run_args.get("source") or None
    where = {"source": source, "video_root": run_args.get("video_root") or None} if source else \
        {"split": "validation", "world_seed": run_args["world_seed"], "dataset_size": run_args["dataset_size"]}
    budgets = tuple(int(k) for k in str(run_args["gating_budgets"]).split(",") if k.strip())
    return tuple(sorted({**where, "nframes_gating": run_args["nframes_gating"], "gating_budgets": budgets,
                         "frame_budget": run_args["frame_budget"],
                         "frame_size": (run_args["frame_size"], run_args["frame_size"])}.items()))


def run_one(name: str, flags: list[str], seed: int, a, runs_dir: Path) -> dict:
    run = f"{name}__s{seed}"
    # evaluated before and after training only (a setting may pass its own --eval-every after this one)
    cmd = [sys.executable, str(ROOT / "trainers" / a.trainer), "--eval-every", "1000000", *flags, "--seed", str(seed),
           "--runs-dir", str(runs_dir), "--run-name", run, "--eval-episodes", str(a.eval_episodes),
           "--eval-first-episode", str(a.eval_first_episode), "--eval-samples", "0", "--no-progress"]
    if a.model:
        cmd += ["--model", a.model]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    t = time.perf_counter()
    with open(runs_dir / f"{run}.log", "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                timeout=a.timeout_s or None).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    row = {"setting": name, "seed": seed, "flags": " ".join(flags), "returncode": rc,
           "wall_s": round(time.perf_counter() - t, 1)}
    hist = runs_dir / run / "history.json"
    if rc == 0 and hist.exists():
        evals = [h for h in json.loads(hist.read_text()) if "eval/accuracy" in h]
        first, last = evals[0], evals[-1]
        run_args = json.loads((runs_dir / run / "args.json").read_text())
        row.update({"steps": last["step"], "before": pick(first), "after": pick(last),
                    "no_tool": no_tool_accuracy(a.eval_first_episode, a.eval_episodes, eval_env_settings(run_args))})
    return row


def pick(rec: dict) -> dict:
    keys = ["accuracy", "format_reward_common", "tool_calls_per_rollout"] + [f"accuracy/{f}" for f in FAMILIES]
    return {k: rec[f"eval/{k}"] for k in keys if f"eval/{k}" in rec}


def markdown(result: dict) -> str:
    n = result["eval_episodes"]
    base = result["no_tool"]
    lines = [f"# The default run on several seeds ({n} validation episodes from {result['eval_first_episode']}, "
             f"evaluated before and after)", "",
             f"`{result['command']}`", "",
             (f"No-tool scripted agent on the same episodes: accuracy **{base['accuracy']:.3f}** in one draw of its "
              f"guesses, **{base['accuracy_expected']:.3f}** on average over {GUESS_SEEDS} draws (sd "
              f"{base['accuracy_sd']:.3f}; the after - no-tool column uses the average) " if base else
              "No-tool scripted agent: its accuracy differs between the settings' evaluation episodes (per run below) ")
             + f"(standard error of one accuracy at n = {n}: about {result['standard_error']:.3f}).", "",
             "| setting | seeds | accuracy before | accuracy after (mean +- sd over seeds) | after - before | "
             "after - no-tool | format before -> after | calls per rollout after |",
             "|---|---|---|---|---|---|---|---|"]
    for s in result["settings"]:
        lines.append(f"| {s['setting']} `{s['flags']}` | {s['seeds']} | {s['before']:.3f} | {s['after']:.3f} +- "
                     f"{s['after_sd']:.3f} | {s['after'] - s['before']:+.3f} | {s['after'] - s['no_tool']:+.3f} | "
                     f"{s['format_before']:.3f} -> {s['format_after']:.3f} | {s['calls_after']:.2f} |")
    lines += ["", "Per run (accuracy before -> after; per family after):", "",
              "| run | wall s | before | after | " + " | ".join(FAMILIES) + " |",
              "|---|---|---|---|" + "---|" * len(FAMILIES)]
    if base:
        lines.append("| no-tool agent | | | " + f"{base['accuracy']:.3f} | "
                     + " | ".join(f"{base.get(f'accuracy/{f}', float('nan')):.2f}" for f in FAMILIES) + " |")
    order = [s["setting"] for s in result["settings"]]
    for r in sorted(result["runs"], key=lambda r: (order.index(r["setting"]) if r["setting"] in order else len(order),
                                                   r["seed"])):
        if "after" not in r:
            lines.append(f"| {r['setting']} s{r['seed']} | {r['wall_s']} | failed (rc {r['returncode']}) | | "
                         + "| " * len(FAMILIES))
            continue
        own = "" if base else f" (no-tool agent {r['no_tool']['accuracy_expected']:.3f} on average)"
        lines.append(f"| {r['setting']} s{r['seed']}{own} | {r['wall_s']} | {r['before']['accuracy']:.3f} | "
                     f"{r['after']['accuracy']:.3f} | "
                     + " | ".join(f"{r['after'].get(f'accuracy/{f}', float('nan')):.2f}" for f in FAMILIES) + " |")
    return "\n".join(lines) + "\n"


def summarise(configs, rows: list[dict], a, argv) -> dict:
    settings = []
    for name, flags in configs:
        done = [r for r in rows if r["setting"] == name and "after" in r]
        if not done:
            continue
        after = [r["after"]["accuracy"] for r in done]
        settings.append({"setting": name, "flags": " ".join(flags), "seeds": len(done),
                         "before": fmean(r["before"]["accuracy"] for r in done), "after": fmean(after),
                         "after_sd": stdev(after) if len(after) > 1 else float("nan"),
                         "no_tool": fmean(r["no_tool"]["accuracy_expected"] for r in done),
                         "format_before": fmean(r["before"].get("format_reward_common", 0) for r in done),
                         "format_after": fmean(r["after"].get("format_reward_common", 0) for r in done),
                         "calls_after": fmean(r["after"].get("tool_calls_per_rollout", 0) for r in done)})
    no_tools = [r["no_tool"] for r in rows if "no_tool" in r]
    befores = [r["before"]["accuracy"] for r in rows if "before" in r]
    p_hat = fmean(befores) if befores else 0.5
    return {"command": "python benchmarks/default_run_seeds.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:])),
            "eval_episodes": a.eval_episodes, "eval_first_episode": a.eval_first_episode,
            "standard_error": math.sqrt(max(p_hat * (1 - p_hat), 0.01) / a.eval_episodes),
            # one no-tool result when every run evaluated on the same episodes, else each run's own
            "no_tool": no_tools[0] if no_tools and all(n == no_tools[0] for n in no_tools) else None,
            "settings": settings, "runs": rows}


def plot(result: dict, path: Path) -> bool:
    """Accuracy before and after per run, one column per setting, with the no-tool agent's line."""
    runs = [r for r in result["runs"] if "after" in r]
    if not runs:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["setting"] for s in result["settings"]]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(names), 3.4))
    for x, name in enumerate(names):
        mine = [r for r in runs if r["setting"] == name]
        for j, r in enumerate(mine):
            dx = (j - (len(mine) - 1) / 2) * 0.06
            ax.plot([x - 0.15 + dx, x + 0.15 + dx], [r["before"]["accuracy"], r["after"]["accuracy"]], "-o",
                    color="tab:blue", alpha=0.6, markersize=3)
        ax.plot([x - 0.35, x + 0.35], [result["settings"][x]["no_tool"]] * 2, color="tab:red", ls="--",
                label="no-tool scripted agent" if x == 0 else None)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("accuracy (before -> after)")
    ax.set_title(f"n = {result['eval_episodes']} from episode {result['eval_first_episode']}; a line per seed",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="default:", help="'name:trainer flags|name:flags' (default: the default run)")
    p.add_argument("--seeds", default="1,2,3", help="comma list of run seeds and ranges (1-3,7)")
    p.add_argument("--trainer", default="para_grpo.py", help="a trainer in trainers/")
    p.add_argument("--model", default="", help="checkpoint to start from (default: the trainer's default)")
    p.add_argument("--eval-episodes", type=int, default=120)
    p.add_argument("--eval-first-episode", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="runs at once, one CPU thread each")
    p.add_argument("--timeout-s", type=float, default=0, help="stop a run after this many seconds (0: never); "
                   "it is then reported as failed")
    p.add_argument("--runs-dir", default="", help="where the runs go (default: OUT_runs, so sweeps with different "
                   "--out never share run folders)")
    p.add_argument("--out", default="runs/benchmarks/default_run_seeds", help="writes OUT.json and OUT.md")
    a = p.parse_args(argv)
    configs = parse_configs(a.configs)
    seeds = parse_seeds(a.seeds)
    runs_dir = Path(a.runs_dir or f"{a.out}_runs")
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(name, flags, seed) for name, flags in configs for seed in seeds]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    result = summarise(configs, rows, a, argv)
    with ThreadPoolExecutor(max(1, a.jobs)) as pool, tqdm(total=len(jobs), desc="runs") as bar:
        for done in as_completed([pool.submit(run_one, *j, a, runs_dir) for j in jobs]):
            rows.append(done.result())
            bar.update()
            result = summarise(configs, rows, a, argv)  # written after every run: a cut-off sweep keeps its part
            out.with_suffix(".json").write_text(json.dumps(result, indent=1))
            out.with_suffix(".md").write_text(markdown(result))
    try:
        plot(result, out.with_suffix(".png"))
    except ImportError:  # matplotlib is the "plots" extra
        print("no plot: pip install matplotlib", file=sys.stderr)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
