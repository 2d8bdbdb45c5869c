#!/usr/bin/env bash
# One device call: the weak v11's own recipe (its sft_args.json: scene_chain direct answers, reading and presence
# drills, K up to 64) continued from v11 on new data draws, side by side on one GPU for ${BUILD_S:-170} s each; then
# the weak prior and perception (draw 0 with 128 frames and crops and no tool episodes; draws 1 and 2 direct answers
# only) of each, stopped after ${EVAL_S:-150} s.
set -u
. benchmarks/results/presence/device_lib.sh && start_device_call
. benchmarks/results/attr_mend/lib.sh
W=agents/lmm/checkpoints/tiny-weak/cold_start
WEAK="--init-from $W --preset cpu --device cuda --amp false --workers 4 --progress false --time-budget-s ${BUILD_S:-170}
  --budgets 4,8,16,32,64 --caption-max-frames 16 --caption-aug-p 0.7 --stage1-frame 1000 --stage1-caption 2500
  --stage1-direct 2000 --stage1-tool 0 --stage1-reading 2500 --stage1-direct-needle 7000 --stage1-presence 9000
  --oracle-fraction 0 --search-agent scene --reading-oracle-fraction 0.2 --grounded-think true --option-think true
  --presence-think true --direct-think scene_chain --native-think fixed --stage1-steps 100000 --warmup 20
  --stage2-steps 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0"
VARIANTS=${VARIANTS:-"w1:--seed 10 --stage1-lr 1e-4 --batch-size 32|w2:--seed 11 --stage1-lr 1e-4 --batch-size 64|w3:--seed 12 --stage1-lr 5e-5 --batch-size 64"}
mends /tmp/m "$WEAK"
echo "builds done at $(( $(date +%s) - T0 )) s"
SEED0_ARGS="--frames 128 --crops 128 --env-default-crops 0 --tool-episodes 0" EVAL_S=${EVAL_S:-150} measure_variants weak
KEEP=${KEEP-$NAMES} finish
