"""What a build's second tool turn copies, from a windows_check.py transcript (truthful captions, K = 4, needle
families): per episode, the scripted sweep agent's second-turn windows for the same first responses (each sighting of
the question's scene cut at its printed times), then counts of second turns whose calls hit one of those windows /
are all among them, and, for builds trained with --zoom-think sighting, whose think line names the question's scene
with times (any) / with exactly the sightings the responses printed.

    python benchmarks/cold_start_lineage/second_turn_check.py CHECKPOINT TRANSCRIPT.json"""
import json
import re
import sys

from agents.lmm.evaluate_lmm import world_config_of
from agents.scripted import printed_sightings, scene_sightings

ckpt, path = sys.argv[1], sys.argv[2]
wc = world_config_of(ckpt)
counts = dict(episodes=0, second_turns=0, calls_hit=0, calls_all_right=0, line_with_times=0, line_exact=0)
for o in json.load(open(path)):
    counts["episodes"] += 1
    if len(o["texts"]) < 2 or "<tool_call>" not in o["texts"][1]:
        continue
    env = wc.env("validation", nframes_gating=True, gating_budgets=(4, 8, 16, 32, 64), subagent="oracle")
    env.reset(seed=o["index"], options={"episode_index": o["index"], "frame_budget": 4})
    env.step(o["texts"][0])  # the oracle sub-agent replays the first turn's responses
    u, scene = env.unwrapped, o["scene"]
    captions = [(c.window, u.episode.source.caption(c.frames.timestamps)) for c in u.last_crops if c.ok]
    printed = [s for _, text in captions for s in printed_sightings(text, scene)]
    right = {(int(a), int(b)) for w, text in captions for a, b in scene_sightings(text, scene, w, split=True)}
    line = o["texts"][1].split("</think>")[0]
    said = re.findall(rf"{scene} scene \([\d.]+(?:-[\d.]+)? s\)", line)
    calls = [(int(float(a)), int(float(b)))
             for a, b in re.findall(r'"start_time": ([\d.]+), "end_time": ([\d.]+)', o["texts"][1])]
    counts["second_turns"] += 1
    counts["calls_hit"] += bool(set(calls) & right)
    counts["calls_all_right"] += bool(calls) and set(calls) <= right
    counts["line_with_times"] += bool(said)
    counts["line_exact"] += bool(printed) and said == printed
    env.close()
print(json.dumps(counts))
