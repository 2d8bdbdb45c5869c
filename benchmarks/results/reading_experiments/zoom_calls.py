"""How a checkpoint trained on zoom-agent traces (sft --search-agent zoom) calls, on validation needle
and needle_attribute episodes at K = 4 with truthful (oracle) crop captions, greedy. Per episode it
checks what the zoom agent's calls are built from: first-turn window ends that are integer parts of
numbers the prompt printed, a second tool turn that names the question's scene, its window ends copied
from the first responses, and the answer.

    PYTHONPATH=. python benchmarks/results/reading_experiments/zoom_calls.py CHECKPOINT [EPISODES]
"""
import re
import sys

from agents.lmm.evaluate_lmm import training_budgets, world_config_of
from agents.lmm.perception import VISION_TOKENS, suppressed
from agents.lmm.policy import TransformersPolicy

ENDS = re.compile(r'"start_time": ([\d.]+), "end_time": ([\d.]+)')


def text_of(m):
    return m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])


def whole(text):
    return {t.split(".")[0] for t in re.findall(r"\d+\.\d", text)} | {"0"}


ck, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 48
pol, wc = TransformersPolicy(ck), world_config_of(ck)
tb = tuple(sorted(set(training_budgets(ck)) | {4}))
env = wc.env("validation", nframes_gating=True, gating_budgets=tb, subagent="oracle")
tally = dict(episodes=0, first_calls=0, first_copied=0, zoom_turns=0, zoom_scene_right=0, zoom_calls=0,
             zoom_copied=0, correct=0)
i = 0
while tally["episodes"] < n:
    obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": 4})
    i += 1
    q = env.unwrapped.episode.question
    if q.family not in ("needle", "needle_attribute"):
        continue
    tally["episodes"] += 1
    scene = re.search(r"during the (\w+) scene", q.text).group(1)
    conv, done = pol.start(info["messages"]), False
    with suppressed(pol, VISION_TOKENS):
        while not done:
            c = pol.generate([conv], temperature=0.0, max_new_tokens=192, stop=("</answer>",), prefix="<think>\n")[0]
            conv.append_completion(c)
            obs, r, term, trunc, info = env.step(c.text)
            done = term or trunc
            if not done:
                pol.extend(conv, [env.messages[-1]])
    msgs = info["messages"]  # system, question, then assistant turns and tool responses alternating
    turns = [(k, text_of(m)) for k, m in enumerate(msgs) if m["role"] == "assistant"]
    for t, (k, text) in enumerate(turns[:2]):
        calls = ENDS.findall(text)
        if t == 0:
            shown = whole(text_of(msgs[1]))
            tally["first_calls"] += len(calls)
            tally["first_copied"] += sum(a in shown and b in shown for a, b in calls)
        elif calls:
            shown = whole(text_of(msgs[k - 1]))
            tally["zoom_turns"] += 1
            tally["zoom_scene_right"] += f"the {scene} scene" in text
            tally["zoom_calls"] += len(calls)
            tally["zoom_copied"] += sum(a in shown and b in shown for a, b in calls)
            if "--debug" in sys.argv:
                print(scene, "|", text[:120].replace("\n", " "), "|", calls, sorted(shown))
    tally["correct"] += bool(info.get("correct"))
print(ck, tally)
