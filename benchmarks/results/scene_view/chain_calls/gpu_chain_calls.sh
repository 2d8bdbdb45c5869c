#!/usr/bin/env bash
# Strong candidates from weak v11 (tenth session, one H200 call, about 9 minutes). Weak v11 answers 0.80 from the
# overview by writing the question's scene list and checking each candidate against it; every strong build so far
# answers 0.43-0.67 there, because at large K it calls before it reads, and under "tools forbidden" it then guesses.
# Each variant gives v11 a strong prior by v11's tail (presence/gpu_tail.sh: the native step of L cold-start steps
# with 65 % native rollouts, then 150 caption steps). First tool turns say the overview's whole reading (scene list and
# check chain), and --tool-on-visible 0.9 of the tool traces are drawn where the overview already shows the answer
# (needless calls, the strong prior's habit). On this CPU (L = 300) the chain before the decision
# (--direct-think scene_chain_calls) kept direct answers (tc50: 0.733) but not calls: kappa 0.17 / 0.06 greedy at
# K = 64 after the native step with 0.5 / 0.9 of the traces needless (cpu_tc50/, cpu_tc90/): greedy decoding reads
# the answer, then answers.
#   tc90L6   scene_chain_calls, L = 600: does a longer cold start move the greedy decision?
#   tcd90    scene_chain_decide (the decision to call first, then the reading), L = 300;
#   tcd90L6  the same, L = 600.
# VARIANTS ("name:L:flags[:start[:share]]|...", on one line; start: a cold_start folder beside its sft_args.json,
# default START; share: the native step's share of native rollouts, default 0.65) replaces that set; the second call of the session:
#   VARIANTS="tcd70tL6:600:--direct-think scene_chain_decide --tool-on-visible 0.7 --stage2-tool 6000|tcd80tL9:900:--direct-think scene_chain_decide --tool-on-visible 0.8 --stage2-tool 6000|tcd90L9:900:--direct-think scene_chain_decide" bash ...
# Then gpu_tail.sh's prior (48 episodes, K = 64) and perception on both draws (n = 192 per arm each). Returns
# results_NAME.tgz (logs, tables) and build_NAME.tgz per finished build (its cold start and sft_args.json).
#   run(command="bash benchmarks/results/scene_view/chain_calls/gpu_chain_calls.sh", carry=[".whl"])
# START (a cold_start folder beside its sft_args.json), NATIVE_S (the native step's limit) and LIMIT_S may be set.
set -u
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start}
B=$OUT T="--grounded-think true --option-think true --presence-think true --tool-on-visible 0.9"
VARIANTS=${VARIANTS:-"tc90L6:600:--direct-think scene_chain_calls|tcd90:300:--direct-think scene_chain_decide|tcd90L6:600:--direct-think scene_chain_decide"}
tail_variant() {  # tail_variant NAME L FROM SHARE THINK...: gpu_tail.sh on FROM into $B/NAME, stopped at LIMIT_S
  local name=$1 l=$2 from=$3 share=$4; shift 4; mkdir -p "$B/$name"
  OUT=$B/$name NATIVE_L=$l NATIVE_S=${NATIVE_S:-240} NATIVE_SHARE=$share STARTS="$name:$from" THINK="$T $*" \
    timeout "${LIMIT_S:-530}" bash benchmarks/results/presence/gpu_tail.sh > "$B/$name/log.txt" 2>&1
}
IFS='|' read -r -a specs <<< "$VARIANTS"
NAMES=""
for spec in "${specs[@]}"; do
  IFS=':' read -r name l flags from share <<< "$spec"; NAMES="$NAMES $name"
  # shellcheck disable=SC2086  # flags is a list of flags
  tail_variant "$name" "$l" "${from:-$START}" "${share:-0.65}" $flags &
done
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
for n in $NAMES; do  # one archive each: a call brings back files of at most 16 MiB
  tar czf "$B/results_$n.tgz" -C "$B" "$n" && rm -rf "${B:?}/$n"
done
ls -la "$B"
