#!/usr/bin/env bash
# This CPU: teach n0 (gpu_dose.sh's second call, no native traces, 0 calls) the compact scene view
# (--direct-think scene_compact: the question's scene's objects by name alone), whose direct turns fit the trainers'
# 64 new tokens where the full view's needle turns (89 at the median) did not. Then perception (seed 0) and the
# weak prior's contrast at 64 and 96 new tokens.
#   bash benchmarks/results/scene_view/cpu_compact.sh .carry/sv/n0/cold_start /tmp/c0
set -eu
# R (the results folder) and EXTRA (more sft flags) may be set: a second round from c0 ran with
#   R=benchmarks/results/scene_view/cpu_compact2 EXTRA="--seed 3" bash ... /tmp/c0/cold_start /tmp/c1
START=$1 OUT_DIR=$2 R=${R:-benchmarks/results/scene_view/cpu_compact}
mkdir -p $R
python trainers/sft.py --preset cpu --tool-prior strong --init-from "$START" --out "$OUT_DIR" \
  --grounded-think true --option-think true --presence-think true --direct-think scene_compact \
  --stage1-frame 1000 --stage1-caption 2000 --stage1-direct 1500 --stage1-tool 0 --stage1-reading 1500 \
  --stage1-presence 3000 --reading-oracle-fraction 0.2 --drill-decisions false --stage1-direct-needle 3000 \
  --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps ${STEPS:-300} \
  --stage1-lr 3e-4 --batch-size 32 --warmup 10 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.7 \
  --oracle-fraction 0 --workers 2 --eval-every 0 ${EXTRA:-} > $R/mend.log 2>&1
cp "$OUT_DIR/sft_args.json" $R/sft_args.json
python benchmarks/perception.py --checkpoint "$OUT_DIR/cold_start" --json $R/perc_s0.json > $R/perc_s0.log 2>&1
for n in 64 96; do
  python benchmarks/prior.py --weak "$OUT_DIR/cold_start" --only weak --episodes 96 --max-new-tokens $n \
    --settings greedy/K,t0.7/K --out $R/prior_$n > $R/prior_$n.log 2>&1
done
grep -E "object F1|scene accuracy|direct answers|\.\.\. (needle|global)|tool gain" $R/perc_s0.md; grep -h "^| weak | 64" $R/prior_*.md
