#!/usr/bin/env bash
# One device call: the weak candidates' full measurement side by side (2026-12-04, seventh session): perception on
# the draw of seed 0 at the default sizes (direct answers n = 240) and of seed 1 (direct answers only, n = 120), and
# the weak prior (96 episodes a row) at 96 and at 64 new tokens a turn. Each job is stopped after JOB_S (380) s.
#   run(command="BUILDS='wc rc3' bash benchmarks/results/scene_view/gpu_measure.sh", carry=[".whl", ".carry/sv/wc", ".carry/sv/rc3"])
# PRIOR=strong measures strong candidates (the strong prior's rows); ROOT (.carry/sv) holds the builds; S1_ARGS
# replaces seed 1's perception sizes. The tenth session's strong candidate, both draws in full:
#   run(command="PRIOR=strong ROOT=.carry/cc BUILDS=tcd90L6 JOB_S=240 S1_ARGS='' bash benchmarks/results/scene_view/gpu_measure.sh", carry=[".whl", ".carry/cc/tcd90L6"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/measure; mkdir -p $R
P=${PRIOR:-weak} S1_ARGS=${S1_ARGS-"--frames 0 --crops 0 --env-default-crops 0 --visible 40 --tool-episodes 0"}
for v in ${BUILDS:-wc rc3}; do
  ck=${ROOT:-.carry/sv}/$v/cold_start
  timeout ${JOB_S:-380} python3 benchmarks/perception.py --checkpoint $ck --device cuda --seed 0 --json $R/perc_${v}_s0.json \
    > $R/perc_${v}_s0.log 2>&1 &
  # shellcheck disable=SC2086  # S1_ARGS is a list of flags
  timeout ${JOB_S:-380} python3 benchmarks/perception.py --checkpoint $ck --device cuda --seed 1 $S1_ARGS \
    --json $R/perc_${v}_s1.json > $R/perc_${v}_s1.log 2>&1 &
  timeout ${JOB_S:-380} python3 benchmarks/prior.py --$P $ck --only $P --episodes 96 --device cuda \
    --out $R/prior96_$v > $R/prior96_$v.log 2>&1 &
  timeout ${JOB_S:-380} python3 benchmarks/prior.py --$P $ck --only $P --episodes 96 --device cuda --max-new-tokens 64 \
    --settings greedy/K,t0.7/K --out $R/prior64_$v > $R/prior64_$v.log 2>&1 &
done
wait
for v in ${BUILDS:-wc rc3}; do
  echo "== $v"
  grep -hE "object F1|scene accuracy|direct answers|\.\.\. (needle|needle_attribute|global) \||calls/ep|tool gain|show the answer|when they do|reading" $R/perc_${v}_s*.md
  grep -hE "^\| $P \| (greedy|t0.7) \| K64 " $R/prior96_$v.md $R/prior64_$v.md
done
tar czf $OUT/results.tgz -C $OUT measure && rm -rf $R
