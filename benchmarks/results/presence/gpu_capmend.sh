#!/usr/bin/env bash
# One device call (one H200): caption mends of a chain build ($1, default .carry/wmix/cold_start, carried in), side
# by side, then perception. The chain's text-only probe warm-up costs crop captions, the default env's 64 px form
# most; these mends try to buy them back without touching the decisions (no direct or tool rows):
#   cap:    300 steps of batch 256 at lr 5e-5, 4,000 frames and 12,000 crops (70 % rendered at 64 px)
#   capread: the same plus 6,000 presence reading drills (decisions untrained) and 15,000 text probes, to hold the
#            reading
# The recorded calls (capmend_call/, README section 6): the default on wmix's final model, then on capread's:
#   VARIANTS="long:--stage1-steps 1200 --stage1-caption 24000 --caption-aug-p 0.8 --stage1-reading 6000 --stage1-presence 15000 --reading-oracle-fraction 0.2 --drill-decisions false|longdirect:<long's args> --stage1-direct 4000" \
#     bash benchmarks/results/presence/gpu_capmend.sh .carry/capread/cold_start
# (longdirect was recorded with --drill-no-tool-share 1.0 too, which shapes drills only and had no effect there;
# trainers/sft.py now refuses it without --stage1-direct-needle.)
# Optional: BASE_NAME=x also measures the start checkpoint as /tmp/c/x on the same draw (side by side);
# PRIOR_EPISODES=n also runs benchmarks/prior.py (strong only, n episodes) on every variant; THINK (the build's think
# flags) may be set.
# The v13 mends (v13mend_call/, README section 8), on the candidate with a second draw at n = 192 per arm:
#   BASE_NAME=v13 PRIOR_EPISODES=48 PERCEPTION_ARGS="--frames 200 --crops 200 --env-default-crops 200 --visible 40
#   --tool-episodes 96 --seed 1 --device cuda" VARIANTS="cr:<capread's>|cr90:<capread's> --caption-aug-p 0.9|..." \
#     bash benchmarks/results/presence/gpu_capmend.sh benchmarks/results/presence/v13_candidate/cold_start
# The tenth session's mend of the chain_calls candidate tcd90L6 (../scene_view/chain_calls/, README there):
#   THINK="--grounded-think true --option-think true --presence-think true --direct-think scene_chain_decide"
#   PRIOR_EPISODES=48 PERCEPTION_ARGS="--frames 0 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 96
#   --seed 0 --device cuda" VARIANTS="cr90:<capread's> --caption-aug-p 0.9|cr90d:<cr90's> --stage1-direct 4000" \
#     bash benchmarks/results/presence/gpu_capmend.sh .carry/cc/tcd90L6/cold_start
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/capmend; mkdir -p $R
S=${1:-.carry/wmix/cold_start}
THINK=${THINK:-"--grounded-think true --option-think true --presence-think true --direct-think needle"}
VARIANTS=${VARIANTS:-"cap:|capread:--stage1-reading 6000 --stage1-presence 15000 --reading-oracle-fraction 0.2 --drill-decisions false"}
mends /tmp/c "$(capmend_args "$S")"
if [ -n "${BASE_NAME:-}" ]; then
  mkdir -p /tmp/c/$BASE_NAME && cp -r $S /tmp/c/$BASE_NAME/cold_start  # with its record: K and frame size
  cp "$(dirname $S)/sft_args.json" /tmp/c/$BASE_NAME/ 2>/dev/null
  NAMES="$BASE_NAME $NAMES"
fi
if [ "${PRIOR_EPISODES:-0}" != 0 ]; then
  for v in $NAMES; do
    python3 benchmarks/prior.py --strong /tmp/c/$v/cold_start --only strong --episodes $PRIOR_EPISODES --device cuda \
      --out $R/prior_$v > $R/prior_$v.log 2>&1 &
  done
fi
# shellcheck disable=SC2086  # NAMES is a list of names
perceive /tmp/c $NAMES
wait
for v in $NAMES; do [ -f $R/prior_$v.md ] && echo "== prior $v" && grep -iE "kappa|format" $R/prior_$v.md | head -4; done
tar czf $OUT/results.tgz -C $OUT capmend && rm -rf $R
for v in $NAMES; do
  [ "$v" != "${BASE_NAME:-}" ] && [ -d /tmp/c/$v/cold_start ] && tar czf $OUT/cap_$v.tgz -C /tmp/c $v/cold_start $v/sft_args.json
done
ls -la $OUT
