"""Which step of reading fails? Teacher-forced on 40 fresh reading drills per setting (train-split
episodes past dataset_size, K = 4, grounded think), the model's greedy next token at three places of
the final turn "<think>\nThe crops show a COLOUR SHAPE.\n</think>\n<answer>X</answer>":
COLOUR and SHAPE (copying the needle out of the tool response) and the answer's first token X given
the right think before it (matching the object to an option letter, or writing the colour).

    python benchmarks/results/reading_experiments/copy_diagnosis.py CHECKPOINT FAMILY ORACLE_FRACTION

ORACLE_FRACTION 1.0: one response (the oracle's call on the evidence); 0.0: the scene agent's five
tiled calls (several responses to pick from). Output of the runs: copy_diagnosis.txt."""
import dataclasses
import sys

import numpy as np
import torch

from agents.lmm.corpus import WorldConfig, build_corpus, encode_record, encoding_policy, pack_records
from agents.lmm.policy import TransformersPolicy
from trainers.sft import Records, Trainee, answer_token_mask

ck, fam, oracle = sys.argv[1], sys.argv[2], float(sys.argv[3])
pol = TransformersPolicy(ck)
tok = pol.tokenizer
wc = dataclasses.replace(WorldConfig(), dataset_size=200000)
samples = build_corpus(0, 0, 0, "paravt", seed=11, wc=wc, budgets=(4,), index_range=(100000, 200000),
                       oracle_fraction=oracle, grounded_think=True, n_reading=40, families=(fam,))
packed = pack_records([encode_record(encoding_policy(tok), s) for s in samples])
recs = Records(packed["ids"], packed["mask"], packed["tok_off"], packed["frames"], packed["img_off"], packed["kind"])
tr = Trainee(pol.model, tok, pol.image_processor, "cpu")
show = tok.encode("The crops show a", add_special_tokens=False)
res = dict(n=0, grounded=0, colour=0, shape=0, answer=0)
with torch.no_grad():
    for i in range(len(recs)):
        b = tr.collate(recs, np.array([i]))
        ids = b["input_ids"]
        kw = dict(input_ids=ids, attention_mask=b["attention_mask"], mm_token_type_ids=(ids == tr.image_token_id).long(),
                  use_cache=False)
        if "frames" in b:
            kw["pixel_values"], kw["image_grid_thw"] = tr.pixel_values(b["frames"])
        pred = pol.model(**kw).logits[0, :-1].argmax(-1).numpy()
        tgt = ids[0, 1:].numpy()
        ans = np.flatnonzero(answer_token_mask(ids.numpy(), b["loss_mask"].numpy(), tr.answer_marks)[0, 1:])
        res["n"] += 1
        res["answer"] += int(pred[ans[0]] == tgt[ans[0]])
        s = ids[0].numpy()
        for j in range(len(s) - len(show)):
            if list(s[j:j + len(show)]) == show:
                p = j + len(show) - 1  # predicts the colour; p + 1 the shape
                res["grounded"] += 1
                res["colour"] += int(pred[p] == tgt[p])
                res["shape"] += int(pred[p + 1] == tgt[p + 1])
print(f"{ck} | {fam} | oracle_fraction {oracle} | {res}")
