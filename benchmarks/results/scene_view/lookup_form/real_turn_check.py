"""Does a lookup formed on text probes carry over to the real second tool turn? (twentieth session)

The same turns as ``../sweep/drill_check.py``: N sweep traces of needle questions from validation (K = 4, truthful
captions), cut before their second tool turn. Here the checkpoint does not choose the scene: its turn is forced up to
"...during the meadow scene (" (the question's scene, as the trace wrote it), and it greedily writes the span. Counted,
in the real conversation (frames and all) and in the drill's text-only form: the span right as the responses printed
it for that scene (``span``), its start's whole seconds right (``entry``), and the span of another printed scene
(``other``). ``lookup_form.py`` measures the same on its synthetic probes.

    python benchmarks/results/scene_view/lookup_form/real_turn_check.py CHECKPOINT [N] [DEVICE]"""
import json
import os
import re
import sys

from agents.lmm.policy import TransformersPolicy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lookup_form import SIGHTING, real_turns  # noqa: E402

ckpt = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
policy = TransformersPolicy(ckpt, device=sys.argv[3] if len(sys.argv) > 3 else "cpu")
turns = real_turns(n, 0, held_out=True)
result = {"checkpoint": ckpt, "turns": len(turns)}
for form in ("frames", "text"):
    convs, wants = [], []
    for trace, drill, so_far, span in turns:
        printed = {times: name for p in drill.messages[3]["content"] for name, times in SIGHTING.findall(p["text"])}
        conv = policy.start((trace if form == "frames" else drill).messages[:4])
        convs.append(conv.append_completion(policy.completion_from_text(so_far)))
        wants.append((span, printed))
    outs = policy.generate(convs, temperature=0.0, max_new_tokens=16, prefix="")  # the turn so far is forced above
    span = entry = other = 0
    for o, (want, printed) in zip(outs, wants):
        got = re.match(r"[\d.]+-[\d.]+ s", o.text)
        span += bool(got) and got.group(0) == want
        entry += o.text.split(".")[0] == want.split(".")[0]
        other += bool(got) and got.group(0) in printed and got.group(0) != want
    result[form] = dict(turns=len(wants), span=span, entry=entry, other=other)
print(json.dumps(result))
