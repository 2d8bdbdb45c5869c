"""The second tool turn on scripted first turns, with and without the overview's frames: N sweep traces of needle
questions from the validation split (K = 4, truthful captions), cut before their second tool turn; the checkpoint
writes that turn greedily (a) in the real conversation, frames and all, and (b) in the sighting drill's text-only
form (agents.lmm.corpus.sighting_probe). Counts turns whose think line names exactly the sightings the responses
printed, and whose calls include each sighting's own window, per form.

    python benchmarks/results/scene_view/sweep/drill_check.py CHECKPOINT [N] [DEVICE]"""
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
traces = build_corpus(0, 0, n, "paravt", seed=0, wc=wc, split="validation", budgets=(4,), oracle_fraction=0.0,
                      search_agent="sweep", families=("needle", "needle_attribute"), zoom_think="sighting")
counts = {}
for form in ("frames", "text"):
    drills = [d for s in traces if (d := sighting_probe(s)) is not None]
    contexts = [(s.messages[:4] if form == "frames" else d.messages[:4]) for s, d in
                zip([s for s in traces if sighting_probe(s) is not None], drills)]
    convs = [policy.start(m) for m in contexts]
    outs = policy.generate(convs, temperature=0.0, max_new_tokens=200)
    exact = hit = 0
    for d, o in zip(drills, outs):
        want = parse_turn(d.assistant_texts[1]).think.strip()
        got = parse_turn(o.text).think.strip()
        exact += got == want
        spans = re.findall(r"scene \(([\d.]+)-([\d.]+) s\)", want)
        hit += bool(spans) and all(f'"start_time": {int(float(a))}, "end_time": {int(float(b))}' in o.text
                                   for a, b in spans)
    counts[form] = dict(turns=len(drills), line_exact=exact, sighting_windows_called=hit)
print(json.dumps(counts))
