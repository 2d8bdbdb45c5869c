"""Held-out scene presence probes (agents.lmm.corpus.scene_presence_probe: responses of 1-2 scenes each, the answer
in the question's scene, 0-2 rivals in other scenes), answered by greedy decoding of the whole final turn: answer
accuracy with and without rivals, and how often the think line is the scene chain word for word. Compares a model
trained on them (lookup_probe.py's scene form) with one that knows only the plain presence chain, which stops at
the first candidate named in any scene.

    PYTHONPATH=. python benchmarks/results/reading_experiments/scene_probe_eval.py CHECKPOINT [PROBES [MAX_OBJECTS
        [SCENES_PER_RESPONSE [DEVICE]]]]
"""
import re
import sys

import numpy as np

from agents.lmm.corpus import scene_presence_probe
from agents.lmm.policy import TransformersPolicy

ck = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
max_objects = int(sys.argv[3]) if len(sys.argv) > 3 else 12
per_response = int(sys.argv[4]) if len(sys.argv) > 4 else 2
pol = TransformersPolicy(ck, device=sys.argv[5] if len(sys.argv) > 5 else "cpu")
probes = [scene_presence_probe(np.random.default_rng(10_000 + i), max_objects, per_response) for i in range(n)]
rows = []
for lo in range(0, n, 50):
    batch = probes[lo:lo + 50]
    convs = [pol.start(p.messages[:3]) for p in batch]
    outs = pol.generate(convs, temperature=0.0, max_new_tokens=160, stop=("</answer>",), prefix="<think>\n")
    for p, out in zip(batch, outs):
        want = p.messages[3]["content"]
        got = re.search(r"<answer>(.*?)</answer>", out.text)
        answer = re.search(r"<answer>(.*?)</answer>", want).group(1)
        rows.append(dict(rivals=p.meta["rivals"] > 0, mcq=p.meta["mcq"], right=bool(got and got.group(1) == answer),
                         chain=out.text.split("</think>")[0] == want.split("</think>")[0]))
print(f"{ck}: {n} probes of at most {max_objects} objects, at most {per_response} scenes a response")
for name, keep in (("all", lambda r: True), ("no rival", lambda r: not r["rivals"]), ("rivals", lambda r: r["rivals"]),
                   ("letter", lambda r: r["mcq"]), ("colour", lambda r: not r["mcq"])):
    rs = [r for r in rows if keep(r)]
    print(f"  {name}: n {len(rs)}, answer right {np.mean([r['right'] for r in rs]):.3f}, "
          f"scene chain word for word {np.mean([r['chain'] for r in rs]):.3f}")
