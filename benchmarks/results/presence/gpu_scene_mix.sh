#!/usr/bin/env bash
# One device call (one H200): the scene-checking chain learned inside a long mixed mend instead of a text-only
# warm-up (gpu_scene_mend.sh showed the warm-up at lr 1e-3 wipes captions and tool calls). From f16z, zu2's corpus
# (frames, 16-frame crops, zoom-played reading drills, presence probes; section 9) with five times the probes and ten
# times the steps, side by side:
#   s3: --scene-presence true, lr 3e-4, drill decisions untrained   s6: the same at lr 6e-4
#   s3d: s3 with the drills' decisions trained                      p3: s3 with the plain presence chain (control)
# then benchmarks/perception.py on each, seeds 0 and 1 (n = 192 per arm each), all side by side. Everything comes back
# as results.tgz (logs, perception) and build_NAME.tgz
# (the recorded call packed the builds into one archive, over the 16 MiB a returned file may hold: they were lost).
#   run(command="bash benchmarks/results/presence/gpu_scene_mix.sh", carry=[".whl", ".carry/f16z"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/scene_mix; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
MIX="--caption-aug-p 0.9 --stage1-reading 12000 --stage1-presence 150000 --reading-oracle-fraction 0.2
  --search-agent zoom --stage1-steps ${STEPS:-2500} --warmup 100 --time-budget-s ${BUDGET:-380}"
MIX=$(echo $MIX)
VARIANTS="s3:$MIX --scene-presence true --stage1-lr 3e-4 --drill-decisions false|s6:$MIX --scene-presence true --stage1-lr 6e-4 --drill-decisions false|s3d:$MIX --scene-presence true --stage1-lr 3e-4 --drill-decisions true|p3:$MIX --stage1-lr 3e-4 --drill-decisions false"
mends /tmp/c "$(capmend_args .carry/f16z/cold_start)"
# shellcheck disable=SC2086  # NAMES is a list of names
perceive_both_draws /tmp/c $NAMES
for v in $NAMES; do
  grep -a "stage1 step\|done in" $R/mend_$v.log | tail -2
  cp /tmp/c/$v/sft_args.json $R/${v}_sft_args.json
done
tar czf $OUT/results.tgz -C $OUT scene_mix && rm -rf $R
# one archive per build: a call returns files of at most 16 MiB, and four builds in one were over it (section 12)
for v in $NAMES; do tar czf $OUT/build_$v.tgz -C /tmp/c $v/cold_start $v/sft_args.json; done
