"""What a build writes on global direct-answer items (the draw of seed 0, tools suppressed, greedy): whether its first
turn says the native "Answer: X" inside the think, which letter, and whether the answer is right. Seventh session:
v11's tail took weak v9's global answers from 0.99 to 0.55-0.60; this shows how.

    PYTHONPATH=. python benchmarks/results/scene_view/tail_direct_check.py CHECKPOINT [PER_FAMILY]
"""
import collections
import re
import sys

from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import forced_first_turns, visible_items
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
policy = TransformersPolicy(ck)
wc, budgets = world_config_of(ck), training_budgets(ck)
items = visible_items(n, wc, budgets, families=("global",), seed=0)
envs, texts = forced_first_turns(policy, wc, items, budgets)
native, letters, right, truth = 0, collections.Counter(), 0, collections.Counter()
for j, (env, text) in enumerate(zip(envs, texts)):
    fin = env.begin_turn(text)[0]
    right += bool(fin and fin[4]["correct"])
    truth[env.episode.question.answer] += 1
    m = re.search(r"Answer: ?([A-E])", text)
    native += bool(m)
    letters[m.group(1) if m else "-"] += 1
    if j < 3:
        print(repr(text[:300]))
print(f"{ck}: {len(texts)} global items; right {right}; native 'Answer:' in the think {native}; "
      f"its letters {dict(letters)}; true letters {dict(truth)}")
