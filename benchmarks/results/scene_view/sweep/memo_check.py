"""Does a build answer the train episodes it was built on better than validation ones? Direct answers with tools
forbidden (perception.py's visible-evidence measure) on N episodes a family whose K-frame overview shows the
evidence: from the validation split, and from the train episodes [LO, HI) (a native step's stage 2 draws
[4000, 6000): about 333 videos, each asked once per family; past the world's dataset size, 6,000, are fresh train
videos no corpus part but the drills draws from).

    python benchmarks/results/scene_view/sweep/memo_check.py CHECKPOINT [N] [LO] [HI]"""
import dataclasses
import json
import sys

import numpy as np

from agents.lmm.corpus import evidence_visible
from agents.lmm.evaluate_lmm import world_config_of
from agents.lmm.perception import VISIBLE_FAMILIES, accuracy_summary, play, visible_items
from agents.lmm.policy import TransformersPolicy
from paravt_env.sources import SyntheticDataset
from paravt_env.world import uniform_timestamps

ckpt = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
lo, hi = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (4000, 6000)
policy = TransformersPolicy(ckpt, device="cpu")
wc = world_config_of(ckpt)
budgets = (4, 8, 16, 32, 64)
wc = dataclasses.replace(wc, dataset_size=max(wc.dataset_size, hi))  # fresh train videos past the world's size
ds = SyntheticDataset("train", wc.world_seed, wc.dataset_size, wc.duration)
rng = np.random.default_rng(0)
train_items = []
for family in VISIBLE_FAMILIES:
    got = 0
    for i in range(lo, hi):
        ep = ds[i]
        if ep.question.family != family:
            continue
        k = next((int(k) for k in rng.permutation(budgets) if evidence_visible(
            uniform_timestamps(0.0, ep.source.duration, int(k)), ep.question.evidence, family)), None)
        if k is not None:
            train_items.append((i, k))
            got += 1
        if got == n:
            break
out = {}
for split, items in (("validation", visible_items(n, world_config_of(ckpt), budgets)), ("train", train_items)):
    records = play(policy, wc, items, budgets=budgets, forbid_tools=True, split=split, batch_size=40)
    out[split] = accuracy_summary(records, VISIBLE_FAMILIES)
print(json.dumps(dict(checkpoint=ckpt, train_range=[lo, hi], **out)))
