"""The second tool turn on scripted first turns, with and without the overview's frames: N sweep traces of needle
questions (K = 4, truthful captions) from WHERE: the validation split (default), the train episodes of a native
step's stage 2 (stage2: [4000, 6000), the few hundred videos its traces and the first sighting drills came from), or
fresh train videos (fresh: past the world's dataset_size, where the drills now come from); cut before their second
tool turn; the checkpoint writes that turn greedily (a) in the real conversation, frames and all, and (b) in the sighting drill's text-only
form (agents.lmm.corpus.sighting_probe). Counts turns whose think line names exactly the sightings the responses
printed, whose calls include each sighting's own window, and where the times of the line's first sighting come
from: a sighting of the question's scene, another scene's sighting, or none the responses printed (a garbled copy).

    python benchmarks/cold_start_lineage/drill_check.py CHECKPOINT [N] [DEVICE] [WHERE]"""
import dataclasses
import json
import re
import sys

from agents.lmm.corpus import build_corpus, sighting_probe
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.policy import TransformersPolicy
from paravt_env.parsing import parse_turn

ckpt = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
policy = TransformersPolicy(ckpt, device=sys.argv[3] if len(sys.argv) > 3 else "cpu")
wc = world_config_of(ckpt)
where = sys.argv[4] if len(sys.argv) > 4 else "validation"
size = wc.dataset_size
split, wc, index_range = {"validation": ("validation", wc, None), "stage2": ("train", wc, (4000, size)),
                          "fresh": ("train", dataclasses.replace(wc, dataset_size=size + 60_000), (size, size + 60_000))
                          }[where]
traces = build_corpus(0, 0, n, "paravt", seed=0, wc=wc, split=split, index_range=index_range, budgets=(4,),
                      oracle_fraction=0.0, search_agent="sweep", families=("needle", "needle_attribute"), zoom_think="sighting",
                      grounded_direct_think="scene_chain_decide")
SIGHTING = re.compile(r"([a-z]+) scene \(([\d.]+(?:-[\d.]+)?) s\)")
pairs = [(s, d) for s in traces if (d := sighting_probe(s)) is not None]
counts = {}
for form in ("frames", "text"):
    # both forms end with the first tool responses: the drill is the trace minus its frames
    convs = [policy.start((s if form == "frames" else d).messages[:4]) for s, d in pairs]
    outs = policy.generate(convs, temperature=0.0, max_new_tokens=200)
    exact = hit = 0
    source = dict(right_scene=0, other_scene=0, never_printed=0, no_times=0)
    for (_, d), o in zip(pairs, outs):
        want = parse_turn(d.assistant_texts[1]).think.strip()
        got = (parse_turn(o.text).think or "").strip()  # a turn with no closed think block copies nothing
        exact += got == want
        printed = [m.groups() for p in d.messages[3]["content"] for m in SIGHTING.finditer(p["text"])]
        scene, first = SIGHTING.search(want).group(1), SIGHTING.search(got)
        seen_by = {times: name for name, times in printed}
        source["no_times" if not first else "never_printed" if first.group(2) not in seen_by else
               "right_scene" if seen_by[first.group(2)] == scene else "other_scene"] += 1
        spans = re.findall(r"scene \(([\d.]+)-([\d.]+) s\)", want)
        hit += bool(spans) and all(f'"start_time": {int(float(a))}, "end_time": {int(float(b))}' in o.text
                                   for a, b in spans)
    counts[form] = dict(turns=len(pairs), line_exact=exact, sighting_windows_called=hit, first_sighting=source)
print(json.dumps(dict(where=where, **counts)))
