"""K = 4, needle and needle_attribute: accuracy with the model's OWN calls, the crops summarised by its own
sub-agent or truthfully (the world's captions). Tells whether captions or calls-and-reading hold the tool
gain back (perception.py's "with tools" row is the first of the two).

    PYTHONPATH=. python benchmarks/results/reading_experiments/own_calls.py CHECKPOINT [EPISODES_PER_FAMILY [DEVICE [SEED]]]
"""
import sys

from agents.lmm import perception
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import NEEDLE_FAMILIES, accuracy_summary, needle_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
policy = TransformersPolicy(ck, device=device)
wc = world_config_of(ck)
items = needle_items(n, 4, dataset_size=wc.dataset_size, seed=seed)  # perception.py's tool-gain episodes
tb = tuple(sorted(set(training_budgets(ck)) | {4}))
for sub in (None, "oracle"):
    recs = perception.play(policy, wc, items, budgets=tb, forbid_tools=False, subagent=sub, batch_size=96, seed=seed)
    s = accuracy_summary(recs, NEEDLE_FAMILIES)
    print(ck, f"seed {seed} | own calls, captions by", sub or "own sub-agent", "| acc", round(s["accuracy"], 3),
          {f: round(v["accuracy"], 2) for f, v in s["by_family"].items()}, "calls/ep", round(s["tool_calls"], 2), flush=True)
