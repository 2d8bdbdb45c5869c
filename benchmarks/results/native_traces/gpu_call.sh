#!/usr/bin/env bash
# One device call (one H200): cold starts with native rollouts from the shipped strong v8, built with v8's own
# think style, their tool prior (96 episodes per decoding) and perception; results and builds into $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
mkdir -p $OUT/r
B=agents/lmm/checkpoints/tiny-strong/cold_start
SFT="--grounded-think true --option-think true --direct-think needle"
L="python3 benchmarks/cold_start_length.py --base-strong $B --native-by trace --native-think spread --episodes 96
   --device cuda --workers 4 --rollout-batch 96"
$L --sft-args "$SFT" --native-shares 0,0.6 --lengths 50,100,200 --build-dir /tmp/lr4 --out $OUT/r/lr4 > $OUT/r/lr4.log 2>&1 &
sleep 45  # the first has built the share-0.6 corpus by then
$L --sft-args "$SFT" --native-shares 0.6 --lengths 100,200 --stage2-lr 2e-4 --build-dir /tmp/lr2 --out $OUT/r/lr2 \
   > $OUT/r/lr2.log 2>&1 &
wait
for d in /tmp/lr*/strong_L*; do
  n=$(basename $(dirname $d))_$(basename $d)
  python3 benchmarks/perception.py --checkpoint $d/cold_start --json $OUT/r/perc_$n.json --frames 128 --crops 128 \
    --env-default-crops 64 --visible 40 --tool-episodes 48 --device cuda > $OUT/r/perc_$n.log 2>&1 &
  while (( $(jobs -r | wc -l) >= 4 )); do sleep 2; done
done
wait
grep -h "^strong L" $OUT/r/*.log
for f in $OUT/r/perc_*.md; do echo "== $f"; grep -E "single-frame object|crop object F1 \(|direct answers|tool gain|reading" $f; done
tar czf $OUT/results.tgz -C $OUT r && rm -rf $OUT/r
i=0; for d in /tmp/lr*/strong_L*native*; do i=$((i+1)); tar czf $OUT/build_$(basename $(dirname $d))_$(basename $d).tgz -C $(dirname $d) $(basename $d)/cold_start $(basename $d)/sft_args.json; done
ls -la $OUT
