"""How much of one evaluation is the draw: the trainer's evaluation of a checkpoint repeated over generation seeds.

The trainer evaluates each episode with one sampled rollout (T = 0.6), so its accuracy on 24 episodes is one draw.
This plays the same episodes (same videos, same gated K) `--draws` times with other generation seeds and reports the
mean and spread, beside the no-tool scripted agent's draws of its guesses on the same episodes
(`default_run_seeds.no_tool_accuracy`), and where the difference sits: each family's and (up to 48 episodes) each
episode's share of draws answered right, beside the no-tool agent's. Draw 0 is exactly the trainer's evaluation.

    python benchmarks/eval_draws.py --models agents/lmm/checkpoints/tiny-strong/cold_start,runs/para_grpo__s1/final_model \\
        --names shipped,after --episodes 24 --draws 16 --out runs/benchmarks/eval_draws/readme24

Runs the default run's evaluation settings (`trainers/para_grpo.py`'s Args); writes OUT.json, OUT.md and OUT.png."""
import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from statistics import fmean, pstdev

import torch
from tqdm import tqdm

if __name__ == "__main__" and not __package__:  # python benchmarks/eval_draws.py: the repo root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.default_run_seeds import eval_env_settings, no_tool_accuracy  # noqa: E402
from trainers.config import parse_args  # noqa: E402
from trainers.core import EVAL_POOL, Dist, evaluation_records, load_policy, resolve_model  # noqa: E402
from trainers.para_grpo import Args  # noqa: E402
from trainers.rollouts import make_env  # noqa: E402


def model_draws(path: str, args, draws: int, device: str = "cpu") -> tuple[list[list[bool]], list[list[bool]]]:
    """Whether each episode was answered right (as the trainer counts), and whether a tool call of it executed, in
    episode order, in each of `draws` evaluations of `path`."""
    args = dataclasses.replace(args, model=path)
    policy = load_policy(resolve_model(args), torch.device(device),
                         generation_cache="graph" if device.startswith("cuda") else "dynamic")
    policy.model.eval()
    envs = [make_env(args, "validation", policy) for _ in range(min(args.eval_episodes, EVAL_POOL))]
    correct, called = [], []
    with torch.no_grad():
        for d in tqdm(range(draws), desc=Path(path).name, leave=False):
            rows = sorted(evaluation_records(policy, envs, args, Dist(), draw=d), key=lambda r: r["episode"])
            correct.append([bool(r["correct"]) for r in rows])
            called.append([r["executed"] > 0 for r in rows])
    return correct, called


def summary(correct: list[list[bool]], called: list[list[bool]]) -> dict:
    """Per draw its accuracy; per episode its share of draws answered right, and of draws that executed a call."""
    values = [fmean(draw) for draw in correct]
    return {"first_draw": values[0], "mean": fmean(values), "sd": pstdev(values), "min": min(values),
            "max": max(values), "draws": values, "per_episode": [fmean(ep) for ep in zip(*correct)],
            "called_per_episode": [fmean(ep) for ep in zip(*called)]}


def by_family(per_episode: list[float], families: list[str]) -> dict[str, float]:
    """Mean of per-episode shares within each family."""
    groups: dict[str, list[float]] = {}
    for share, family in zip(per_episode, families):
        groups.setdefault(family, []).append(share)
    return {f: fmean(v) for f, v in sorted(groups.items())}


def plot(result: dict, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(result["models"])
    fig, ax = plt.subplots(figsize=(2.4 + 1.6 * len(names), 4.4))
    for i, n in enumerate(names):
        ys = result["models"][n]["draws"]
        # accuracies on few episodes repeat: spread equal values sideways so each draw shows
        xs = [i + 0.04 * (ys[:j].count(y) - ys.count(y) / 2) for j, y in enumerate(ys)]
        ax.scatter(xs, ys, alpha=0.6, s=18)
        ax.plot([i - 0.25, i + 0.25], [result["models"][n]["mean"]] * 2, color="black")
    nt = result["no_tool"]
    ax.axhline(nt["accuracy_expected"], color="grey", linestyle="--", label="no-tool agent, mean of its draws")
    ax.axhline(nt["accuracy"], color="grey", linestyle=":", label="no-tool agent, the draw the trainer reports")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("accuracy")
    ax.set_title(f"validation episodes {result['first']}-{result['first'] + result['episodes'] - 1},"
                 f"\n{result['draws']} generation draws", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", required=True, help="comma list of checkpoints")
    p.add_argument("--names", default="", help="comma list of row names (default: the paths)")
    p.add_argument("--first", type=int, default=0, help="first validation episode")
    p.add_argument("--episodes", type=int, default=24)
    p.add_argument("--draws", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (a GPU samples other texts than a CPU does)")
    p.add_argument("--trainer-args", default="", help="trainer flags that change the evaluation, quoted, e.g. "
                   "\"--subagent-max-new-tokens 128\" (default: the default run's)")
    p.add_argument("--out", required=True, help="OUT.json, OUT.md and OUT.png are written")
    a = p.parse_args(argv)
    models = a.models.split(",")
    names = a.names.split(",") if a.names else models
    if len(names) != len(models):
        p.error("--names needs one name per model")
    if a.draws < 1 or a.episodes < 1:
        p.error("--draws and --episodes must be >= 1")
    torch.set_num_threads(a.threads)
    args = dataclasses.replace(parse_args(Args, shlex.split(a.trainer_args)), eval_first_episode=a.first,
                               eval_episodes=a.episodes)
    result = {"command": shlex.join(["python", *sys.argv]), "first": a.first, "episodes": a.episodes, "draws": a.draws,
              "device": a.device, "trainer_args": a.trainer_args,
              "no_tool": no_tool_accuracy(a.first, a.episodes, eval_env_settings(dataclasses.asdict(args))),
              "models": {}}
    for name, path in zip(names, models):
        result["models"][name] = {"path": path, **summary(*model_draws(path, args, a.draws, a.device))}
        print(name, json.dumps({k: v for k, v in result["models"][name].items()
                                if k not in ("draws", "per_episode", "called_per_episode")}), flush=True)
    write(result, Path(a.out))


def write(result: dict, out: Path) -> None:
    """OUT.json, OUT.md and OUT.png of one result."""
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(result, indent=1))
    nt, first, n = result["no_tool"], result["first"], result["episodes"]
    lines = [f"`{result['command']}`", "",
             f"Validation episodes {first}-{first + n - 1}, the default run's evaluation (T = 0.6, gated "
             f"K), {result['draws']} generation draws per model; draw 0 is the trainer's own. One episode is "
             f"{1 / n:.3f} of accuracy.", "",
             "| model | the trainer's draw | mean | sd | min | max |", "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {m['first_draw']:.3f} | {m['mean']:.3f} | {m['sd']:.3f} | {m['min']:.3f} | {m['max']:.3f} |"
              for name, m in result["models"].items()]
    lines += [f"| no-tool scripted agent (guess draws) | {nt['accuracy']:.3f} | {nt['accuracy_expected']:.3f} | "
              f"{nt['accuracy_sd']:.3f} | | |"]
    families = nt["family_per_episode"]
    names = list(result["models"])
    per_family = {name: by_family(m["per_episode"], families) for name, m in result["models"].items()}
    no_tool = by_family(nt["expected_per_episode"], families)
    called = {name: by_family(m["called_per_episode"], families) for name, m in result["models"].items()
              if "called_per_episode" in m}  # results written before 2026-12-07 lack it
    lines += ["", "Per family: accuracy, mean over draws (the no-tool agent: over its guess draws); in brackets, "
              "episodes. Then each model's share of episodes in which a tool call executed.", "",
              "| family | " + " | ".join(names) + " | no-tool agent | " + " | ".join(f"{n}: called" for n in called)
              + " |", "|---|" + "---|" * (len(names) + 1 + len(called))]
    lines += [f"| {f} ({families.count(f)}) | " + " | ".join(f"{per_family[name][f]:.2f}" for name in names)
              + f" | {no_tool[f]:.2f} |" + "".join(f" {called[n][f]:.2f} |" for n in called) for f in no_tool]
    if n <= 48:
        lines += ["", "Per episode: share of draws answered right.", "",
                  "| episode | family | " + " | ".join(names) + " | no-tool agent |", "|---|---|" + "---|" * (len(names) + 1)]
        lines += [f"| {first + i} | {families[i]} | " + " | ".join(f"{result['models'][name]['per_episode'][i]:.2f}"
                                                               for name in names)
                  + f" | {nt['expected_per_episode'][i]:.2f} |" for i in range(n)]
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")
    plot(result, Path(f"{out}.png"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
