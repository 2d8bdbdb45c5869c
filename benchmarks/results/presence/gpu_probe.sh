#!/usr/bin/env bash
# One device call (one H200): does a chain of yes/no checks ("A. red star: no; B. blue circle: yes.") make the
# multi-object lookup learnable, where the fixed think line leaves the answer token to find it alone?
# Four probe runs side by side from the shipped strong cold start, 7 minutes each, batch 512, the written-out
# text forward; held-out sets of at most 2, 4 and 12 objects. exact_* = the whole final turn right, teacher-forced
# (what greedy decoding writes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
A="--text-forward eager --batch-size 512 --pool 150000 --eval-every 250"
bash benchmarks/results/reading_experiments/gpu_lookup.sh "$OUT/pr" 7 \
  "fixed||$A --think fixed" \
  "presence||$A --think presence" \
  "presence_curr||$A --think presence --curriculum 2:1500,4:1500,12:100000 --advance-at 0.9" \
  "presence_lr1e3||$A --think presence --lr 1e-3"
grep -h "step" "$OUT"/pr/*.txt | tail -3
