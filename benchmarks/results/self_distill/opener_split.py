"""Split the default run's evaluation by how each rollout opens its first turn: with a ParaVT think line or with
one of the native dialect's openers (agents.lmm.corpus.NATIVE_OPENERS, the strong prior's minority mode). Per model:
the share of native-opened rollouts, the accuracy and common format of each kind, and the native openers' total
probability at the first opener (T = 0.7, the prior benchmark's temperature; over the same rollouts).

    python benchmarks/results/self_distill/opener_split.py --models A,B --names a,b --episodes 120 --out FILE

Episodes, seeds, pool size (32, as the trainer's evaluation) and temperatures are the default run's evaluation."""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "trainers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from para_grpo import Args  # noqa: E402
from self_distill import native_opener_ids, scores, turn_openers  # noqa: E402
from trainers.core import EVAL_POOL, load_policy, play_episodes, resolve_model  # noqa: E402
from trainers.rollouts import episode_record, make_env  # noqa: E402


def split(path: str, episodes: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    args = Args()
    args.model = path
    policy = load_policy(resolve_model(args), torch.device("cpu"))
    policy.model.eval()
    native_ids = native_opener_ids(policy.tokenizer)
    envs = [make_env(args, "validation", policy) for _ in range(min(episodes, EVAL_POOL))]
    kinds, correct, fmt, mass = [], [], [], []
    with torch.no_grad():
        for _, rs in play_episodes(policy, envs, args, range(episodes), temperature=args.eval_temperature,
                                   sub_temperature=args.eval_subagent_temperature):
            sc = scores(policy, [r.conv for r in rs], native_ids)
            for r, s in zip(rs, sc):
                first = turn_openers(r.conv.generated_mask).index(True)
                kinds.append(r.conv.token_ids[first] in native_ids)
                rec = episode_record(r)
                correct.append(float(rec["correct"]))
                fmt.append(float(rec["format_reward_common"]))
                mass.append(float(s["native_pin"][first].exp()))
    kinds, correct, fmt = np.array(kinds), np.array(correct), np.array(fmt)

    def part(sel):
        return {"n": int(sel.sum()), "accuracy": float(correct[sel].mean()) if sel.any() else None,
                "format_common": float(fmt[sel].mean()) if sel.any() else None}
    return {"model": path, "episodes": episodes, "accuracy": float(correct.mean()), "format_common": float(fmt.mean()),
            "native_share": float(kinds.mean()), "native_mass_t07": float(np.mean(mass)),
            "paravt_opened": part(~kinds), "native_opened": part(kinds)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", required=True, help="comma list of checkpoints")
    p.add_argument("--names", default="", help="comma list of row names (default: the paths)")
    p.add_argument("--episodes", type=int, default=120)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True, help="FILE.json and FILE.md are written")
    a = p.parse_args()
    models = a.models.split(",")
    names = a.names.split(",") if a.names else models
    if len(names) != len(models):
        p.error("--names needs one name per model")
    rows = {}
    for name, path in zip(names, models):
        rows[name] = split(path, a.episodes, a.threads)
        print(name, json.dumps(rows[name]), flush=True)
    Path(a.out + ".json").write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))

    def cell(d):
        return f"{d['n']}: {d['accuracy']:.3f} / {d['format_common']:.3f}" if d["n"] else "0"
    lines = [f"`python {' '.join(sys.argv)}`", "",
             f"Validation episodes 0-{a.episodes - 1}, the default run's evaluation (T = 0.6, gated K).", "",
             "| model | accuracy | format | native-opened share | native mass at the first opener (T = 0.7) "
             "| ParaVT-opened: n: accuracy / format | native-opened: n: accuracy / format |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['accuracy']:.3f} | {r['format_common']:.3f} | {r['native_share']:.3f} | "
              f"{r['native_mass_t07']:.3f} | {cell(r['paravt_opened'])} | {cell(r['native_opened'])} |"
              for n, r in rows.items()]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
