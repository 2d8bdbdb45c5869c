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
PERC_S=${PERC_S:-140} PERC_CROPS=60 quick_perceive /tmp/m 0 $NAMES
pack_builds /tmp/m $NAMES
