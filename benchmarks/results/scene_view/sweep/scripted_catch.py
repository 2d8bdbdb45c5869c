"""Scripted agents' windows at K = 4 on the needle families, with truthful captions: the share of episodes whose
crops show the answer object, accuracy, calls and turns, on the same episodes the perception benchmark's tool
gain uses (``needle_items(N, 4, seed=SEED)``), in the world of a checkpoint (56 px frames, crops of 8 frames).

    python benchmarks/results/scene_view/sweep/scripted_catch.py CHECKPOINT [N] [SEED] [AGENTS]

The eleventh session's table: N = 48, SEEDS 0 and 1, the tcd90L6 build's world."""
import sys

import numpy as np

from agents.lmm.corpus import answer_object, named_objects
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.perception import needle_items
from agents.scripted import make_agent

ckpt = sys.argv[1]
n, seed = (int(sys.argv[2]) if len(sys.argv) > 2 else 48), (int(sys.argv[3]) if len(sys.argv) > 3 else 0)
agents = (sys.argv[4] if len(sys.argv) > 4 else "no_tool,uniform,scene,zoom,sweep,oracle").split(",")
wc = world_config_of(ckpt)
items = needle_items(n, 4, dataset_size=wc.dataset_size, seed=seed)
for name in agents:
    shown, correct, calls, turns = [], [], [], []
    for i, k in items:
        env = wc.env("validation", nframes_gating=True, gating_budgets=(4, 8, 16, 32, 64), subagent="oracle")
        obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": k})
        agent, captions, done = make_agent(name, env, seed=i), [], False
        while not done:
            obs, _, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
            captions += [env.unwrapped.episode.source.caption(c.frames.timestamps)
                         for c in env.unwrapped.last_crops if c.ok]
        shown.append(answer_object(env.unwrapped.episode.question) in named_objects(" ".join(captions)))
        correct.append(bool(info.get("correct")))
        calls.append(info["num_tool_calls"])
        turns.append(info["turn"])
        env.close()
    print(f"{name:8s} shown {np.mean(shown):.3f} accuracy {np.mean(correct):.3f} calls {np.mean(calls):.2f} "
          f"turns {np.mean(turns):.2f}")
