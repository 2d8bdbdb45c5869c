"""Does a lookup formed on text probes carry over to the real second tool turn? (twentieth session)

The same turns as ``../sweep/drill_check.py``: N sweep traces of needle questions from validation (K = 4, truthful
captions), cut before their second tool turn. Here the checkpoint does not choose the scene: its turn is forced up to
"...during the meadow scene (" (the question's scene, as the trace wrote it), and it greedily writes the span. Counted,
in the real conversation (frames and all) and in the drill's text-only form: the span right as the responses printed
it for that scene (``span``), its start's whole seconds right (``entry``), and the span of another printed scene
(``other``). ``lookup_form.py`` measures the same on its synthetic probes.

    python benchmarks/results/scene_view/lookup_form/real_turn_check.py CHECKPOINT [N] [DEVICE]"""
import json
import re
import sys

from agents.lmm.corpus import build_corpus, sighting_probe
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.policy import TransformersPolicy

ckpt = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
policy = TransformersPolicy(ckpt, device=sys.argv[3] if len(sys.argv) > 3 else "cpu")
wc = world_config_of(ckpt)
traces = build_corpus(0, 0, n, "paravt", seed=0, wc=wc, split="validation", budgets=(4,), oracle_fraction=0.0,
                      search_agent="sweep", families=("needle", "needle_attribute"), zoom_think="sighting",
                      grounded_direct_think="scene_chain_decide")
SIGHTING = re.compile(r"([a-z]+) scene \(([\d.]+-[\d.]+ s)\)")
pairs = [(s, d) for s in traces if (d := sighting_probe(s)) is not None]
result = {"checkpoint": ckpt, "turns": len(pairs)}
for form in ("frames", "text"):
    convs, wants = [], []
    for s, d in pairs:
        turn = d.assistant_texts[1]
        cut = SIGHTING.search(turn)
        if cut is None:  # the trace's turn names no sighting (none was printed): nothing to copy
            continue
        prefix = turn[:cut.start(2)]
        printed = {times: name for p in d.messages[3]["content"] for name, times in SIGHTING.findall(p["text"])}
        conv = policy.start((s if form == "frames" else d).messages[:4])
        convs.append(conv.append_completion(policy.completion_from_text(prefix)))
        wants.append((cut.group(2), printed))
    outs = policy.generate(convs, temperature=0.0, max_new_tokens=16, prefix="")  # the turn so far is forced above
    span = entry = other = 0
    for o, (want, printed) in zip(outs, wants):
        got = re.match(r"[\d.]+-[\d.]+ s", o.text)
        span += bool(got) and got.group(0) == want
        entry += o.text.split(".")[0] == want.split(".")[0]
        other += bool(got) and got.group(0) in printed and got.group(0) != want
    result[form] = dict(turns=len(wants), span=span, entry=entry, other=other)
print(json.dumps(result))
