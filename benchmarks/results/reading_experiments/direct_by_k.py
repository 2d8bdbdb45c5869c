"""Direct answers from the overview as benchmarks/perception.py measures them (its "visible evidence" items of the
draws of seeds 0 and 1: questions whose evidence the K-frame overview shows; tool tags suppressed, greedy, a turn
without an answer continued from "<answer>"), split by family and overview size K, and by what the answer's think
line says: "I need a closer look." (the tool turn's line: the model had decided to call) or a grounded line
("The overview shows a yellow star."). Is it the many frames of a large K, the reading, or the decision?

    PYTHONPATH=. python benchmarks/results/reading_experiments/direct_by_k.py CHECKPOINT [PER_FAMILY]
"""
import collections
import sys

import numpy as np

from agents.lmm.corpus import THINK_TOOL
from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import forced_first_turns, visible_items
from agents.lmm.policy import TransformersPolicy
from paravt_env.world import uniform_timestamps

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
policy = TransformersPolicy(ck)
wc, budgets = world_config_of(ck), training_budgets(ck)
items = [it for seed in (0, 1) for it in visible_items(n, wc, budgets, seed=seed)]
envs, texts = forced_first_turns(policy, wc, items, budgets)
rows = []
for env, text, (i, k) in zip(envs, texts, items):
    finished = env.begin_turn(text)[0]
    rows.append(dict(family=env.episode.question.family, k=k, correct=bool(finished and finished[4]["correct"]),
                     decided_to_call=THINK_TOOL.strip() in text, text=text, env=env))
print(f"{ck}: {len(rows)} episodes, K drawn from {budgets}; accuracy {np.mean([r['correct'] for r in rows]):.3f}")
cells = collections.defaultdict(list)
for r in rows:
    for family in (r["family"], "all"):
        cells[(family, r["k"])].append(r["correct"])
for family in ("all", "global", "needle", "needle_attribute"):
    print(f"  {family}: " + ", ".join(f"K={k}: {np.mean(cells[(family, k)]):.2f} (n {len(cells[(family, k)])})"
                                      for k in budgets if cells[(family, k)]))
print("by the think line:")
for family in ("global", "needle", "needle_attribute"):
    for called in (True, False):
        got = [r["correct"] for r in rows if r["family"] == family and r["decided_to_call"] == called]
        if got:
            print(f"  {family}, {'the tool line' if called else 'another line'}: n {len(got)}, "
                  f"accuracy {np.mean(got):.3f}")
print("grounded lines on needle_attribute (what the overview shows, by the world's caption):")
for r in [r for r in rows if r["family"] == "needle_attribute" and not r["decided_to_call"]][:6]:
    shown = r["env"].episode.source.caption(uniform_timestamps(0.0, r["env"].episode.source.duration, r["k"]))
    print(f"  K={r['k']} {r['env'].episode.question.prompt().splitlines()[0]} (answer {r['env'].episode.question.answer})"
          f"\n    said: {' '.join(r['text'].split())}\n    overview objects: {shown.split('Objects: ')[-1]}")
