"""K = 4, needle and needle_attribute, the model's OWN calls with the crops captioned truthfully (the world's
captions): do its windows catch the answer, and does it read the answer when they do? Splits perception.py's
"with tools" accuracy into the share of episodes whose responses name the answer object (benchmarks/perception.py
now reports that share for every build, as "its crops show the answer object"), the accuracy on those,
and how many other needles of the same shape (needle_attribute) or other options (needle) the responses name.

    PYTHONPATH=. python benchmarks/results/reading_experiments/own_windows.py CHECKPOINT [EPISODES_PER_FAMILY [DEVICE [SEED]]]
"""
import sys
from dataclasses import dataclass

import numpy as np

from agents.lmm import perception
from agents.lmm.corpus import WorldConfig, answer_object, named_objects, tool_response_text
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import needle_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
kept = []


@dataclass
class KeepingWorld(WorldConfig):
    """The checkpoint's world, keeping every env it makes so the responses can be read after play()."""

    def env(self, *args, **kwargs):
        e = super().env(*args, **kwargs)
        kept.append(e)
        return e


policy = TransformersPolicy(ck, device=device)
wc = KeepingWorld(**vars(world_config_of(ck)))
items = needle_items(n, 4, dataset_size=wc.dataset_size, seed=seed)
tb = tuple(sorted(set(training_budgets(ck)) | {4}))
recs = perception.play(policy, wc, items, budgets=tb, forbid_tools=False, subagent="oracle", batch_size=96, seed=seed)
rows = []
for env, rec in zip(kept, recs):
    u = env.unwrapped
    q = u.episode.question
    answer = answer_object(q)
    named = named_objects(tool_response_text(u))
    if q.family == "needle":
        rivals = sum(o in named for o in q.options if o != answer)
    else:  # other objects of the asked shape
        rivals = sum(x.split()[1] == answer.split()[1] and x != answer for x in named)
    rows.append(dict(family=q.family, caught=answer in named, rivals=rivals, objects=len(named),
                     correct=rec["correct"], calls=rec["tool_calls"]))
for fam in ("needle", "needle_attribute", None):
    rs = [r for r in rows if fam is None or r["family"] == fam]
    caught = [r for r in rs if r["caught"]]
    print(f"{fam or 'both'}: n {len(rs)}, accuracy {np.mean([r['correct'] for r in rs]):.3f}, calls/ep "
          f"{np.mean([r['calls'] for r in rs]):.2f}, objects named/ep {np.mean([r['objects'] for r in rs]):.1f} | "
          f"responses name the answer {len(caught) / len(rs):.3f}; accuracy then "
          f"{np.mean([r['correct'] for r in caught]) if caught else float('nan'):.3f} (with no rival named "
          f"{np.mean([r['correct'] for r in caught if not r['rivals']] or [float('nan')]):.3f}, n "
          f"{sum(not r['rivals'] for r in caught)}; with rivals "
          f"{np.mean([r['correct'] for r in caught if r['rivals']] or [float('nan')]):.3f}, n "
          f"{sum(bool(r['rivals']) for r in caught)}); otherwise "
          f"{np.mean([r['correct'] for r in rs if not r['caught']] or [float('nan')]):.3f}", flush=True)
