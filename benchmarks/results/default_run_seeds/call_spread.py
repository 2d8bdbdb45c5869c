"""Where a checkpoint calls the tool and what the calls buy it, family by family, greedy and at the evaluation's
T = 0.6: the default run's evaluation (validation episodes F..F+N-1, gated K in {4, 8, 16}, the trainer's own envs,
seeds and rollout code: `trainers.core.evaluation_records`), one rollout per episode, split into episodes with and
without an executed call.

    python benchmarks/results/default_run_seeds/call_spread.py --out OUT.json [--first 0 --episodes 120] NAME=CKPT ...

CKPT "-" is the shipped strong cold start. Writes OUT.json (every episode: family, K, calls, accuracy, format) and
OUT.md (per checkpoint and temperature: accuracy and calls per family, and accuracy with / without calls)."""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "trainers"))

from para_grpo import Args  # noqa: E402
from trainers.core import Dist, evaluation_records, load_policy, resolve_model  # noqa: E402
from trainers.rollouts import make_env  # noqa: E402


def episodes(ckpt: str, temperature: float, first: int, n: int) -> list[dict]:
    """The trainer's own evaluation of CKPT on episodes first..first+n-1 at `temperature`, episode by episode."""
    args = Args()
    args.model = "" if ckpt == "-" else ckpt
    args.eval_temperature, args.eval_first_episode, args.eval_episodes = temperature, first, n
    policy = load_policy(resolve_model(args), torch.device("cpu"))
    policy.model.eval()
    envs = [make_env(args, "validation", policy) for _ in range(min(n, 32))]  # the trainer's pool size
    with torch.no_grad():
        return [{"episode": r["episode"], "family": r["family"], "K": int(r["frame_budget"]),
                 "calls": int(r["executed"]), "correct": bool(r["correct"]),
                 "format_common": r["format_reward_common"]}
                for r in evaluation_records(policy, envs, args, Dist())]


def table(results: dict) -> str:
    families = sorted({e["family"] for rows in results.values() for e in rows})
    head = ("| checkpoint | T | accuracy | calls | " + " | ".join(families) + " |\n|---|---|---|---|"
            + "---|" * len(families))
    lines = [head]
    for key, rows in results.items():
        name, temp = key.rsplit("@", 1)
        cells = []
        for f in families:
            mine = [e for e in rows if e["family"] == f]
            called = [e for e in mine if e["calls"]]
            plain = [e for e in mine if not e["calls"]]

            def acc(es):
                return f"{sum(e['correct'] for e in es) / len(es):.2f}" if es else "-"

            cells.append(f"{acc(mine)}; {sum(e['calls'] for e in mine) / len(mine):.1f} calls; "
                         f"{len(called)} called: {acc(called)}, {len(plain)} not: {acc(plain)}")
        lines.append(f"| {name} | {temp} | {sum(e['correct'] for e in rows) / len(rows):.3f} | "
                     f"{sum(e['calls'] for e in rows) / len(rows):.2f} | " + " | ".join(cells) + " |")
    return ("Each family cell: accuracy; executed calls per episode; episodes with an executed call: their accuracy, "
            "episodes without: theirs.\n\n" + "\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CKPT (CKPT '-': the shipped strong cold start)")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--episodes", type=int, default=120)
    p.add_argument("--temperatures", default="0,0.6")
    p.add_argument("--out", required=True, help="writes OUT.json and OUT.md")
    a = p.parse_args()
    torch.set_num_threads(1)
    results = {}
    for spec in a.checkpoints:
        name, _, ckpt = spec.partition("=")
        for t in (float(x) for x in a.temperatures.split(",")):
            results[f"{name}@{t:g}"] = episodes(ckpt or name, t, a.first, a.episodes)
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    md = table(results)
    out.with_suffix(".md").write_text(f"# Where the tool is called, per family (validation episodes {a.first}-"
                                      f"{a.first + a.episodes - 1})\n\n`python {' '.join(sys.argv)}`\n\n" + md)
    print(md)


if __name__ == "__main__":
    main()
