"""Direct answers from the overview (perception.py's "visible evidence" items: questions whose evidence the K-frame
overview shows, tools forbidden, greedy), split by family and overview size K, over the draws of seeds 0 and 1.
Is it the many frames of a large K that the model cannot read, or the question itself?

    PYTHONPATH=. python benchmarks/results/reading_experiments/direct_by_k.py CHECKPOINT [PER_FAMILY [JSON_OUT]]
"""
import collections
import json
import sys

import numpy as np

from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import play, visible_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
policy = TransformersPolicy(ck)
wc, budgets = world_config_of(ck), training_budgets(ck)
records = []
for seed in (0, 1):
    items = visible_items(n, wc, budgets, seed=seed)
    records += play(policy, wc, items, budgets=budgets, forbid_tools=True, batch_size=64, seed=seed, tools=True)
cells = collections.defaultdict(list)
for r in records:
    for family in (r["family"], "all"):
        cells[(family, r["k"])].append(r["correct"])
print(f"{ck}: {len(records)} episodes, K drawn from {budgets}")
for family in ("all", "global", "needle", "needle_attribute"):
    row = [f"K={k}: {np.mean(cells[(family, k)]):.2f} (n {len(cells[(family, k)])})" for k in budgets
           if cells[(family, k)]]
    print(f"  {family}: " + ", ".join(row))
if len(sys.argv) > 3:
    json.dump([{k: v for k, v in r.items() if isinstance(v, (int, float, str, bool))} for r in records],
              open(sys.argv[3], "w"), indent=0)
