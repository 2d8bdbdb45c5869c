"""How often does a K-frame overview already contain a question's evidence?

For each family and K in {4, 8, 16, 32, 64}: the fraction of questions for which at least
one overview timestamp falls inside an evidence window (for counting and temporal order:
inside *every* window, since the answer needs all of them; for the other families one
window is all the evidence there is). Low values mean the tool is necessary.

    python benchmarks/tool_necessity.py --episodes 1200 --out benchmarks/results
"""

import argparse
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from paravt_env import FAMILIES, SyntheticDataset
from paravt_env.world import uniform_timestamps

BUDGETS = (4, 8, 16, 32, 64)


def evidence_seen(timestamps: np.ndarray, evidence, family: str) -> bool:
    hits = [bool(np.any((timestamps >= a) & (timestamps < b))) for a, b in evidence]
    return all(hits) if family in ("counting", "temporal_order") else any(hits)


def measure(episodes: int, seed: int, split: str) -> dict:
    data = SyntheticDataset(split=split, seed=seed, size=episodes)
    seen = {f: {k: [] for k in BUDGETS} for f in FAMILIES}
    for i in tqdm(range(len(data)), desc="questions"):
        ep = data[i]
        for k in BUDGETS:
            ts = uniform_timestamps(0.0, ep.source.duration, k)
            seen[ep.question.family][k].append(evidence_seen(ts, ep.question.evidence, ep.question.family))
    return {f: {k: float(np.mean(v)) for k, v in ks.items()} for f, ks in seen.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=1200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", default="validation")
    p.add_argument("--out", default="runs/benchmarks", help="output folder (default: runs/benchmarks, untracked; --out benchmarks/results refreshes the committed results, and python benchmarks/update_readme.py then copies their tables into the README)")
    a = p.parse_args()
    table = measure(a.episodes, a.seed, a.split)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tool_necessity.json").write_text(json.dumps({"episodes": a.episodes, "seed": a.seed,
                                                          "split": a.split, "fraction_seen": table}, indent=2))
    lines = ["| family | " + " | ".join(f"K={k}" for k in BUDGETS) + " |",
             "|---|" + "---|" * len(BUDGETS)]
    lines += [f"| {f} | " + " | ".join(f"{table[f][k]:.0%}" for k in BUDGETS) + " |" for f in FAMILIES]
    md = "\n".join(lines)
    (out / "tool_necessity.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
