"""How long a direct-answer first turn is under each scene view: tokens of the first assistant turn of 60 needle and
needle_attribute direct drills of the train split (the shipped tokenizer), against the trainers' 64 new tokens a turn.

    PYTHONPATH=. python benchmarks/results/scene_view/view_lengths.py
"""
import numpy as np
from transformers import AutoTokenizer

from agents.lmm.corpus import WorldConfig, build_corpus

tok = AutoTokenizer.from_pretrained("agents/lmm/checkpoints/tiny-weak/cold_start")
for view in ("scene", "scene_compact", "scene_span"):
    ss = build_corpus(0, 60, 0, "paravt", seed=11, wc=WorldConfig(), grounded_think="options",
                      grounded_direct_think=view, families=("needle", "needle_attribute"), index_range=(0, 3000))
    n = [len(tok(s.assistant_texts[0])["input_ids"]) for s in ss if s.kind == "direct"]
    print(view, len(n), "median", np.median(n), "p90", np.percentile(n, 90), "max", max(n),
          "over 64:", sum(x > 64 for x in n))
print(ss[0].assistant_texts[0])
