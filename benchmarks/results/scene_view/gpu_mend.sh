#!/usr/bin/env bash
# Call 1: the scene view (--direct-think scene) taught by a long mend of the shipped cold starts, four variants side
# by side on one H200, then a quick perception of each (seed 0: direct answers n = 40 a family, tool gain n = 96 per
# arm). Returns results.tgz and one build archive per variant.
#   run(command="bash benchmarks/results/scene_view/gpu_mend.sh", carry=[".whl"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/mend; mkdir -p $R
STRONG=agents/lmm/checkpoints/tiny-strong/cold_start
WEAK=agents/lmm/checkpoints/tiny-weak/cold_start
THINK="--grounded-think true --option-think true --presence-think true --direct-think scene"
BASE="--preset gpu --amp false --stage1-frame 4000 --stage1-caption 12000 --stage1-direct 6000 --stage1-tool 8000
  --stage1-reading 8000 --stage1-direct-needle 16000 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0
  --stage2-caption 0 --stage2-steps 0 --stage1-steps ${STEPS:-2000} --warmup 50 --perception-warmup 0
  --caption-max-frames 16 --caption-aug-p 0.7 --workers 15 --time-budget-s ${BUDGET:-330} --eval-every 0
  --batch-size 256 --batch-tokens 49152 --oracle-fraction 0 $THINK"
VARIANTS="sA:--tool-prior strong --stage1-lr 3e-4 --init-from $STRONG|sB:--tool-prior strong --stage1-lr 1e-4 --init-from $STRONG|wV:--tool-prior weak --stage1-lr 3e-4 --init-from $WEAK|wS:--tool-prior weak --stage1-lr 3e-4 --init-from $STRONG"
mends /tmp/m "$(echo $BASE)"
for v in $NAMES; do grep -a "corpus ready\|done in" $R/mend_$v.log | tail -2; done
PERC_S=${PERC_S:-200} PERC_CROPS=100 quick_perceive /tmp/m 0 $NAMES
pack_builds /tmp/m $NAMES
