#!/usr/bin/env bash
# One device call (one H200): caption mends of a chain build ($1, default .carry/wmix/cold_start, carried in), side
# by side, then perception. The chain's text-only probe warm-up costs crop captions, the default env's 64 px form
# most; these mends try to buy them back without touching the decisions (no direct or tool rows):
#   cap:    300 steps of batch 256 at lr 5e-5, 4,000 frames and 12,000 crops (70 % rendered at 64 px)
#   capread: the same plus 6,000 presence reading drills (decisions untrained) and 15,000 text probes, to hold the
#            reading
# The recorded calls (capmend_call/, README section 6): the default on wmix's final model, then on capread's:
#   VARIANTS="long:--stage1-steps 1200 --stage1-caption 24000 --caption-aug-p 0.8 --stage1-reading 6000 --stage1-presence 15000 --reading-oracle-fraction 0.2 --drill-decisions false|longdirect:<long's args> --stage1-direct 4000 --drill-no-tool-share 1.0" \
#     bash benchmarks/results/presence/gpu_capmend.sh .carry/capread/cold_start
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
R=$OUT/capmend; mkdir -p $R
S=${1:-.carry/wmix/cold_start}
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
VARIANTS=${VARIANTS:-"cap:|capread:--stage1-reading 6000 --stage1-presence 15000 --reading-oracle-fraction 0.2 --drill-decisions false"}
IFS='|' read -r -a SPECS <<< "$VARIANTS"
NAMES=$(for spec in "${SPECS[@]}"; do echo "${spec%%:*}"; done)
MEND="--preset gpu --amp false --stage1-frame 4000 --stage1-caption 12000 --stage1-direct 0 --stage1-tool 0
      --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 300
      --warmup 20 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.7 --workers 7 --time-budget-s 170
      --eval-every 0 --batch-size 256 --batch-tokens 49152 --tool-prior strong --stage1-lr 5e-5 $THINK
      --oracle-fraction 0 --init-from $S"
for spec in "${SPECS[@]}"; do
  # shellcheck disable=SC2086  # MEND and a variant's args are lists of flags
  python3 trainers/sft.py $MEND ${spec#*:} --out /tmp/c/${spec%%:*} > $R/mend_${spec%%:*}.log 2>&1 &
done
wait
P="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"
for v in $NAMES; do
  python3 benchmarks/perception.py --checkpoint /tmp/c/$v/cold_start $P --json $R/perc_$v.json > $R/perc_$v.log 2>&1 &
done
wait
for v in $NAMES; do echo "== $v"; grep -E "object F1|direct answers|tool gain|calls/ep|reading" $R/perc_$v.md; done
tar czf $OUT/results.tgz -C $OUT capmend && rm -rf $R
for v in $NAMES; do
  [ -d /tmp/c/$v/cold_start ] && tar czf $OUT/cap_$v.tgz -C /tmp/c $v/cold_start $v/sft_args.json
done
ls -la $OUT
