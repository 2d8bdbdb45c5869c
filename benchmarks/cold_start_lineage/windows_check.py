"""A checkpoint's own windows at K = 4 on the needle families, with truthful captions (the oracle sub-agent), so
choosing windows is seen apart from captioning: per episode its turns, the question's scene, the overview's
times, the scene agent's windows and whether its crops showed the answer; the summary line gives the share caught,
accuracy and calls, and per family how many episodes made a second tool turn and how many of those named the
question's scene in its think line.

    python benchmarks/cold_start_lineage/windows_check.py CHECKPOINT N OUT.json [DEVICE]"""
import json
import re
import sys

import numpy as np

from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.perception import needle_items, play
from agents.lmm.policy import TransformersPolicy
from agents.scripted import QUESTION_SCENE_RE, make_agent

ckpt, n, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
policy = TransformersPolicy(ckpt, device=sys.argv[4] if len(sys.argv) > 4 else "cpu")
wc = world_config_of(ckpt)
items = needle_items(n, 4, dataset_size=wc.dataset_size, seed=0)
records = play(policy, wc, items, budgets=(4, 8, 16, 32, 64), forbid_tools=False, subagent="oracle", batch_size=48)
out = []
for r in records:
    env = wc.env("validation", nframes_gating=True, gating_budgets=(4, 8, 16, 32, 64), subagent="oracle")
    obs, info = env.reset(seed=r["index"], options={"episode_index": r["index"], "frame_budget": 4})
    episode = env.unwrapped.episode
    agent = make_agent("scene", env, seed=0)
    memory = agent.remember(obs, info)
    m = QUESTION_SCENE_RE.search(episode.question.text)
    out.append(dict(r, scene=m and m.group(1), duration=round(episode.source.duration, 1),
                    overview_times=[round(float(t), 1) for t in env.unwrapped.overview.timestamps],
                    scene_agent_windows=[(round(a), round(b)) for a, b in agent.windows(memory)],
                    evidence=episode.question.evidence))
    env.close()
json.dump(out, open(out_path, "w"), indent=1)
print(f"caught {np.mean([o['answer_in_crops'] for o in out]):.3f} accuracy {np.mean([o['correct'] for o in out]):.3f} "
      f"calls {np.mean([o['tool_calls'] for o in out]):.2f}")
for family in sorted({o["family"] for o in out}):
    mine = [o for o in out if o["family"] == family]
    second = [o for o in mine if len(o["texts"]) > 1 and "<tool_call>" in o["texts"][1]]
    named = [o for o in second if (m := re.search(r"during the (\w+) scene", o["texts"][1])) and m.group(1) == o["scene"]]
    print(f"{family}: n {len(mine)}, second tool turn {len(second)}, naming the question's scene {len(named)}, "
          f"caught {sum(o['answer_in_crops'] for o in mine)}, correct {sum(o['correct'] for o in mine)}")
