#!/usr/bin/env bash
# Call 2: the scene view's line now opens with the question's scene name ("The city scene in the overview: ...");
# call 1's builds had learned to caption the overview from its first frame. Three runs side by side continue call 1's
# sA (strong, lr 3e-4 and 6e-4) and wS (weak) with more direct-answer drills, then a quick perception of each
# (seed 0). Returns results.tgz and one build archive per variant.
#   run(command="bash benchmarks/results/scene_view/gpu_mend2.sh", carry=[".whl", ".carry/sv/sA", ".carry/sv/wS"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/mend2; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think scene"
BASE="--preset gpu --amp false --stage1-frame 2000 --stage1-caption 8000 --stage1-direct 6000 --stage1-tool 6000
  --stage1-reading 4000 --stage1-direct-needle 24000 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0
  --stage2-caption 0 --stage2-steps 0 --stage1-steps ${STEPS:-3000} --warmup 50 --perception-warmup 0
  --caption-max-frames 16 --caption-aug-p 0.7 --workers 15 --time-budget-s ${BUDGET:-390} --eval-every 0
  --batch-size 256 --batch-tokens 49152 --oracle-fraction 0 $THINK"
VARIANTS="s3:--tool-prior strong --stage1-lr 3e-4 --init-from .carry/sv/sA/cold_start|s6:--tool-prior strong --stage1-lr 6e-4 --init-from .carry/sv/sA/cold_start|w3:--tool-prior weak --stage1-lr 3e-4 --init-from .carry/sv/wS/cold_start"
mends /tmp/m "$(echo $BASE)"
for v in $NAMES; do grep -a "corpus ready\|done in\|stage1 step" $R/mend_$v.log | tail -2; done
for v in $NAMES; do
  timeout ${PERC_S:-140} python3 benchmarks/perception.py --checkpoint /tmp/m/$v/cold_start --frames 0 --crops 60 \
    --env-default-crops 0 --visible 40 --tool-episodes 96 --device cuda --seed 0 --json $R/perc_${v}_s0.json \
    > $R/perc_${v}_s0.log 2>&1 &
done
wait
for v in $NAMES; do echo "== $v"; grep -E "object F1 \(|direct answers|needle|global|tool gain|calls/ep" $R/perc_${v}_s0.md | head -9; done
for v in $NAMES; do cp /tmp/m/$v/sft_args.json $R/${v}_sft_args.json; done
tar czf $OUT/results.tgz -C $OUT mend2 && rm -rf $R
for v in $NAMES; do tar czf $OUT/build_$v.tgz -C /tmp/m $v/cold_start $v/sft_args.json; done
