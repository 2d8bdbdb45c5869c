"""How long the shipped strong model's sub-agent summaries are, one pass (4 frames) at a time: the scripted sweep
agent plays validation episodes 0-11 (gated K in 4, 8, 16; 56 px frames) with the model as its sub-agent at up to 128
new tokens a pass, and the generated length of every pass is counted.

    python benchmarks/results/default_run_seeds/subagent_lengths.py [CHECKPOINT]
"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from agents.lmm import Subagent
from agents.lmm.default import default_checkpoint
from trainers.core import load_policy
from paravt_env.env import ParaVTLongVideoEnv
from agents.scripted import AGENTS
torch.set_num_threads(1)
path = str(default_checkpoint("strong")) if len(sys.argv) < 2 else sys.argv[1]
pol = load_policy(path, torch.device("cpu"))
lens = []
class Rec(Subagent):
    def run(self, crops, **kw):
        rs = super().run(crops, **kw)
        for r in rs:
            lens.extend(int(sum(c.generated_mask)) for c in r.completions)
        return rs
sub = Rec(pol, max_new_tokens=128)
env = ParaVTLongVideoEnv(split="validation", subagent=sub, nframes_gating=True, gating_budgets=(4, 8, 16), frame_size=(56, 56))
for i in range(12):
    obs, info = env.reset(seed=10000 + i, options={"episode_index": i})
    agent = AGENTS["sweep"](env, seed=i)
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(agent.act(obs, info))
        done = term or trunc
l = np.array(lens)
print(len(l), "passes; tokens mean", l.mean(), "median", np.median(l), "share > 32:", (l > 32).mean(), "share >= 128:", (l >= 128).mean())
