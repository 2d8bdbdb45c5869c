#!/usr/bin/env bash
# Strong candidates from weak v11 (tenth session, one H200 call, about 9 minutes). Weak v11 answers 0.80 from the
# overview by writing the question's scene list and checking each candidate against it; every strong build so far
# answers 0.43-0.67 there, because at large K it calls before it reads, and under "tools forbidden" it then guesses.
# Each variant gives v11 a strong prior by v11's tail (presence/gpu_tail.sh: the native step of L cold-start steps
# with 65 % native rollouts, then 150 caption steps) with --direct-think scene_chain_calls: every first tool turn says
# the overview's whole reading (scene list and check chain) before it calls, and --tool-on-visible SHARE of the tool
# traces are drawn where the overview already shows the answer (needless calls, the strong prior's habit).
#   tc70t   SHARE 0.7, twice the tool traces (6,000), L = 300: the needless calls without fewer needed ones;
#   tc90L6  SHARE 0.9, L = 600: the longer cold start;
#   tc50L6  SHARE 0.5, L = 600: this CPU's tc50 (L = 300: direct answers 0.733, but kappa 0.08 greedy at K = 64;
#           cpu_tc50/) with a longer cold start. tc90 at L = 300 runs on this CPU (cpu_tc90/).
# Then gpu_tail.sh's prior (48 episodes, K = 64) and perception on both draws (n = 192 per arm each). Returns
# results.tgz (logs, tables) and build_NAME.tgz per finished build (its cold start and sft_args.json).
#   run(command="bash benchmarks/results/scene_view/chain_calls/gpu_chain_calls.sh", carry=[".whl"])
# START (a cold_start folder beside its sft_args.json), NATIVE_S (the native step's limit) and LIMIT_S may be set.
set -u
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start}
B=$OUT T="--grounded-think true --option-think true --presence-think true --direct-think scene_chain_calls"
NAMES="tc70t tc90L6 tc50L6"
tail_variant() {  # tail_variant NAME L THINK...: gpu_tail.sh on START into $B/NAME, stopped at LIMIT_S
  local name=$1 l=$2; shift 2; mkdir -p "$B/$name"
  OUT=$B/$name NATIVE_L=$l NATIVE_S=${NATIVE_S:-240} STARTS="$name:$START" THINK="$T $*" \
    timeout "${LIMIT_S:-530}" bash benchmarks/results/presence/gpu_tail.sh > "$B/$name/log.txt" 2>&1
}
tail_variant tc70t 300 --tool-on-visible 0.7 --stage2-tool 6000 &
tail_variant tc90L6 600 --tool-on-visible 0.9 &
tail_variant tc50L6 600 --tool-on-visible 0.5 &
wait
# timeout stops gpu_tail.sh, not the jobs it started; none may outlive the call
pkill -f "python3 (benchmarks/(prior|perception|cold_start_length)|trainers/sft)\.py" || true
for n in $NAMES; do  # each finished build comes back whole, to ship if it meets the targets
  [ -d /tmp/f/$n/cold_start ] && tar czf "$B/build_$n.tgz" -C /tmp/f "$n/cold_start" "$n/sft_args.json"
done
for n in $NAMES; do
  echo "== $n"; grep -E "direct answers|tool gain|with tools \(|forbidden|show the answer|when they do|object F1 \(|strong \| 64" \
    "$B/$n/log.txt" | cut -c1-200
  cat "$B/$n"/tail/s*/summary.txt 2>/dev/null | head -40
done
tar czf "$B/results.tgz" -C "$B" $NAMES && rm -rf "${B:?}"/tc70t "${B:?}"/tc90L6 "${B:?}"/tc50L6
ls -la "$B"
