"""What the strong cold start thinks and answers on needle questions whose overview shows the evidence.
python benchmarks/results/direct_answers/inspect_direct.py CHECKPOINT [N_PER_FAMILY]"""
import sys

import numpy as np

from agents.lmm.corpus import caption_needles
from agents.lmm.perception import VISION_TOKENS, TOOL_TAGS, forced_answers, suppressed, visible_items
from agents.lmm.policy import TransformersPolicy
from agents.lmm.evaluate_lmm import training_budgets, world_config_of

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
tools = (sys.argv[3] if len(sys.argv) > 3 else "tools") == "tools"
quiet = len(sys.argv) > 4
policy = TransformersPolicy(ck)
wc, budgets = world_config_of(ck), training_budgets(ck)
items = visible_items(n, wc, budgets)
envs, convs = [], []
for i, k in items:
    env = wc.env("validation", nframes_gating=True, gating_budgets=tuple(budgets), subagent="oracle", tools=tools)
    obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": k})
    envs.append(env)
    convs.append(policy.start(info["messages"]))
with suppressed(policy, VISION_TOKENS + TOOL_TAGS):
    texts = forced_answers(policy, convs)
stats = {}
for env, (i, k), text in zip(envs, items, texts):
    u = env.unwrapped
    q = u.episode.question
    said = u.episode.source.caption(np.asarray(u.overview.timestamps, dtype=np.float64))
    needles = caption_needles(said)
    res = u.begin_turn(text)[0]
    ok = bool(res and res[4].get("correct"))
    st = stats.setdefault(q.family, [0, 0])
    st[0] += ok
    st[1] += 1
    quiet or print(f"--- ep {i} K={k} {q.family} correct={ok} answer={q.answer}\nQ: {q.prompt()}\nOVERVIEW objects: {needles}"
          f"\nMODEL: {text!r}")
print(stats)
