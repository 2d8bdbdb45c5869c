"""Rollouts of a checkpoint on validation episodes 0-23 (T = 0.7, gated K in {4, 8, 16}, 192 tokens a turn, the oracle
sub-agent): how many earn R_tool's parseable-call credit while the environment ran no call, with the first three in full.

    python benchmarks/results/rl_dose/parseable_probe.py CHECKPOINT > OUT.txt"""
import sys
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.policy import TransformersPolicy
ck = sys.argv[1]
policy = TransformersPolicy(ck)
wc = world_config_of(ck)
n = 0
for i in range(24):
    env = wc.env("validation", nframes_gating=True, frame_budget=64, subagent="oracle", gating_budgets=(4, 8, 16))
    _, info = env.reset(seed=i, options={"episode_index": i})
    conv = policy.start(info["messages"])
    texts = []
    for turn in range(3):
        c = policy.generate([conv], temperature=0.7, max_new_tokens=192, seed=i * 10 + turn)[0]
        conv.append_completion(c); texts.append(c.text)
        _, r, term, trunc, info = env.step(c.text)
        if term or trunc:
            break
        policy.extend(conv, [info["messages"][-1]])
    comp = info["reward_components"]
    if comp.get("tool/parseable", 0) > 0 and info["num_tool_calls"] == 0:
        n += 1
        if n <= 3:  # three in full, then only the count
            print("=== episode", i, info["family"], "turns", len(texts), comp)
            for t in texts: print("---", repr(t[:700]))
print("parseable-credit without executed call:", n, "of 24")
