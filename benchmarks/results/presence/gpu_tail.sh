#!/usr/bin/env bash
# One device call (one H200): v11's tail (device_lib.sh v11_tail: the native step, then 150 caption-only steps) on
# carried builds side by side, then the prior (48 episodes at K = 64) and perception on two disjoint draws
# (--seed 0 and 1, n = 192 per arm each), with the baselines in $BASES measured on the same draws.
#   STARTS="name:path/cold_start|..." BASES="name:path/cold_start|..." bash benchmarks/results/presence/gpu_tail.sh
# The recorded call (tail_call/, README section 8): the v13 caption mends cr90long and cr90 (gpu_capmend.sh),
# with BASES="v12:agents/lmm/checkpoints/tiny-strong/cold_start|v13:benchmarks/results/presence/v13_candidate/cold_start".
# THINK (the builds' think flags, used in the native step's traces), PRIOR_TOKENS (the prior's new tokens a turn,
# default 96) and SEEDS (the perception draws, default "0 1") may be set.
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
OUTR=$OUT/tail; mkdir -p $OUTR; R=$OUTR
THINK=${THINK:-"--grounded-think true --option-think true --presence-think true --direct-think needle"}
place() {  # place ROOT "name:path|..." -> the names; each path copied with its record (K and frame size) to ROOT/name
  local root=$1 spec; IFS='|' read -r -a specs <<< "$2"
  for spec in "${specs[@]}"; do
    mkdir -p "$root/${spec%%:*}" && cp -r "${spec#*:}" "$root/${spec%%:*}/cold_start"
    cp "$(dirname "${spec#*:}")/sft_args.json" "$root/${spec%%:*}/" 2>/dev/null
    echo "${spec%%:*}"
  done
}
NAMES=$(place /tmp/s "$STARTS")
# shellcheck disable=SC2086  # NAMES is a list of names
v11_tail /tmp/s /tmp/n /tmp/f $NAMES
BASE_NAMES=$(place /tmp/f "${BASES:-}")
for v in $NAMES $BASE_NAMES; do
  python3 benchmarks/prior.py --strong /tmp/f/$v/cold_start --only strong --episodes 48 --device cuda \
    --max-new-tokens "${PRIOR_TOKENS:-96}" --out $OUTR/prior_$v > $OUTR/prior_$v.log 2>&1 &
done
for seed in ${SEEDS:-0 1}; do
  mkdir -p $OUTR/s$seed
  # shellcheck disable=SC2086  # name lists
  (R=$OUTR/s$seed; PERCEPTION_ARGS="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 96
   --seed $seed --device cuda" perceive /tmp/f $NAMES $BASE_NAMES > $OUTR/s$seed/summary.txt) &
done
wait
cat $OUTR/s0/summary.txt $OUTR/s1/summary.txt
for v in $NAMES $BASE_NAMES; do echo "== prior $v"; grep -E "^\| strong \| 64 " $OUTR/prior_$v.md; done
tar czf $OUT/results.tgz -C $OUT tail && rm -rf $OUTR
for v in $NAMES; do
  [ -d /tmp/f/$v/cold_start ] && tar czf $OUT/tail_$v.tgz -C /tmp/f $v/cold_start $v/sft_args.json
done
ls -la $OUT
