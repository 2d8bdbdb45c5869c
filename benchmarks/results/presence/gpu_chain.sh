#!/usr/bin/env bash
# One device call (one H200), the whole chain from a strong cold start ($1, default the shipped one):
#   1. text-only presence probes (lookup_probe.py, curriculum 2 -> 4 -> 12 objects, lr 1e-3, $WARMUP_MIN minutes,
#      default 2; 0 skips it): the lookup forms in text first (gpu_build.sh: drills alone left it unformed)
#   2. the presence mend, one per variant in $VARIANTS ("name:extra sft args|..."), side by side: 600 steps of
#      batch 256 at lr 1e-4 (a variant's args may override), reading drills, 4,000 frames, 12,000 crops
#   3. v11's tail: the native step (L = 300, 65 % native rollouts) and 150 caption-only steps at lr 5e-5
#   4. perception (tool gain with its own calls and sub-agent) at the end
# The recorded call (chain_call/) is the default: variants r8k and r12k (8,000 / 12,000 reading drills).
# Presence probes mixed into the mend instead of before it, with direct answers kept in it:
#   WARMUP_MIN=0 VARIANTS="mix1e-4:--stage1-reading 12000 --stage1-presence 30000 --stage1-direct 4000 --stage1-steps 900|mix3e-4:--stage1-reading 12000 --stage1-presence 30000 --stage1-direct 4000 --stage1-steps 900 --stage1-lr 3e-4" \
#     bash benchmarks/results/presence/gpu_chain.sh
# Run (mix_call/, README section 6): reading fell to 0.18. With the warm-up kept (warm_call/):
#   WARMUP_MIN=2 VARIANTS="wmix:<mix1e-4's args>|wr12kd:--stage1-reading 12000 --stage1-direct 4000" bash ...
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/chain; mkdir -p $R
S=${1:-agents/lmm/checkpoints/tiny-strong/cold_start}
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
WARMUP_MIN=${WARMUP_MIN:-2}
VARIANTS=${VARIANTS:-"r8k:--stage1-reading 8000|r12k:--stage1-reading 12000"}
INIT=$S
if [ "$WARMUP_MIN" != 0 ]; then
  timeout 200 python3 benchmarks/results/reading_experiments/lookup_probe.py $S /tmp/probe $WARMUP_MIN 0 multi \
      --device cuda --think presence --text-forward eager --batch-size 512 --pool 100000 --workers 12 --eval-every 200 \
      --eval-objects 2,4,12 --lr 1e-3 --curriculum 2:300,4:300,12:100000 --advance-at 0.9 > $R/probe.log 2>&1
  cp $(dirname $S)/sft_args.json /tmp/probe/
  INIT=/tmp/probe
fi
MEND="--preset gpu --amp false --stage1-frame 4000 --stage1-caption 12000 --stage1-direct 0 --stage1-tool 0
      --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 600
      --warmup 30 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.5 --workers 7 --time-budget-s 170
      --eval-every 0 --batch-size 256 --batch-tokens 49152 --tool-prior strong --stage1-lr 1e-4 $THINK
      --oracle-fraction 0 --reading-oracle-fraction 0.2 --init-from $INIT"
mends /tmp/m "$MEND"
# shellcheck disable=SC2086  # NAMES is a list of names
v11_tail /tmp/m /tmp/n /tmp/f $NAMES
# shellcheck disable=SC2086  # NAMES is a list of names
perceive /tmp/f $NAMES
[ -f $R/probe.log ] && grep "step\|stage" $R/probe.log | tail -2 | cut -c1-400
tar czf $OUT/results.tgz -C $OUT chain && rm -rf $R
for v in $NAMES; do
  [ -d /tmp/m/$v/cold_start ] && tar czf $OUT/mend_$v.tgz -C /tmp/m $v/cold_start $v/sft_args.json
  [ -d /tmp/f/$v/cold_start ] && tar czf $OUT/final_$v.tgz -C /tmp/f $v/cold_start $v/sft_args.json
done
ls -la $OUT
