"""K = 4, needle and needle_attribute, the scripted agents in the LMM's world (56 px, 8-frame crops), the crops
captioned truthfully: in how many episodes do their windows show the answer object, and how often do they answer
right (reading by rule)? The ceiling a model imitating them could reach; compare perception.py's
"its crops show the answer object" row for a model.

    PYTHONPATH=. python benchmarks/results/reading_experiments/teacher_windows.py [EPISODES_PER_FAMILY [SEED]]
"""
import sys

import numpy as np

from agents.lmm.corpus import WorldConfig, answer_object, named_objects, tool_response_text
from agents.lmm.perception import needle_items
from agents.scripted import make_agent

n = int(sys.argv[1]) if len(sys.argv) > 1 else 96
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
wc = WorldConfig()
for name in ("scene", "zoom", "uniform"):
    shown, correct = [], []
    for i, k in needle_items(n, 4, dataset_size=wc.dataset_size, seed=seed):
        env = wc.env("validation", nframes_gating=True, gating_budgets=(4,), subagent="oracle")
        obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": k})
        agent = make_agent(name, env.unwrapped, seed=i)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
            done = terminated or truncated
        u = env.unwrapped
        shown.append(answer_object(u.episode.question) in named_objects(tool_response_text(u)))
        correct.append(bool(info.get("correct")))
        env.close()
    print(f"{name}: seed {seed}, n {len(shown)}, crops show the answer {np.mean(shown):.3f}, accuracy {np.mean(correct):.3f}",
          flush=True)
