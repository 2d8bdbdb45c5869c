"""Five validation episodes at K = 4 played by a checkpoint with truthful (oracle) crop captions:
its own calls, the tool responses, its final turn. The record behind README's account of where the
reading-drill builds fail with their own calls (output: inspect_own_calls.txt).

    python benchmarks/results/reading_experiments/inspect_own_calls.py CHECKPOINT
"""
import sys
from agents.lmm.policy import TransformersPolicy
from agents.lmm.evaluate_lmm import world_config_of, training_budgets
from agents.lmm.perception import suppressed, VISION_TOKENS
ck = sys.argv[1]
pol = TransformersPolicy(ck); wc = world_config_of(ck)
tb = tuple(sorted(set(training_budgets(ck)) | {4}))
for i in [0, 6, 12, 1, 7]:
    env = wc.env("validation", nframes_gating=True, gating_budgets=tb, subagent="oracle")
    obs, info = env.reset(seed=i, options={"episode_index": i, "frame_budget": 4})
    q = env.unwrapped.episode.question
    print("=" * 20, i, q.family, q.text, q.options, "truth", q.answer, "evidence", q.evidence, "dur", env.unwrapped.episode.source.duration)
    conv = pol.start(info["messages"]); done = False
    with suppressed(pol, VISION_TOKENS):
        while not done:
            c = pol.generate([conv], temperature=0.0, max_new_tokens=192, stop=("</answer>",), prefix="<think>\n")[0]
            conv.append_completion(c)
            print("ASSISTANT:", c.text.replace("\n", " | "))
            obs, r, term, trunc, info = env.step(c.text)
            done = term or trunc
            if not done:
                m = env.unwrapped.messages[-1]
                txt = " ".join(p.get("text", "") for p in m["content"] if isinstance(p, dict)) if not isinstance(m["content"], str) else m["content"]
                print("TOOL:", txt.replace("\n", " | ")[:1200])
                pol.extend(conv, [m])
    print("correct", info.get("correct"))
