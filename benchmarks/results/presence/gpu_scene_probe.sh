#!/usr/bin/env bash
# One device call (one H200): does the scene-checking presence chain (section 10) learn its lookup at the dose that
# formed the plain chain (section 1: about 1,000 steps of batch 512)? Four text-probe runs side by side from the
# shipped strong cold start, then each scored by greedy decoding on 400 held-out probes of two scenes a response,
# split by rivals (scene_probe_eval.py).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=benchmarks/results/reading_experiments
A="--text-forward eager --batch-size 512 --pool 200000 --eval-every 250 --lr 1e-3"
C="--curriculum 2:1500,4:1500,12:100000 --advance-at 0.9"
MIN=${MIN:-7}
FORM=scene1 bash $R/gpu_lookup.sh "$OUT/sp" "$MIN" "scene1||$A" "scene1_curr||$A $C" &
FORM=scene bash $R/gpu_lookup.sh "$OUT/sp" "$MIN" "scene||$A" "scene_curr||$A $C" &
wait
for t in "$OUT"/sp/*.tar; do
  name=$(basename "$t" .tar)
  mkdir -p /tmp/m && tar -C /tmp/m -xf "$t"
  python $R/scene_probe_eval.py "/tmp/m/$name" 400 12 2 cuda 2>&1 | grep -v Loading | tee "$OUT/sp/eval_$name.txt"
done
rm -f "$OUT"/sp/*.tar
