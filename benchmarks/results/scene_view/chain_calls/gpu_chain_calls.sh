#!/usr/bin/env bash
# Strong candidates from weak v11 (tenth session, one H200 call, about 9 minutes). Weak v11 answers 0.80 from the
# overview by writing the question's scene list and checking each candidate against it; every strong build so far
# answers 0.43-0.67 there, because at large K it calls before it reads, and under "tools forbidden" it then guesses.
# Each variant gives v11 a strong prior by v11's tail (presence/gpu_tail.sh: the native step with 65 % native rollouts,
# then 150 caption steps), with its own think flags:
#   tc50, tc25  --direct-think scene_chain_calls --tool-on-visible 0.5 / 0.25: a share of the tool traces is drawn
#               where the overview already shows the answer (needless calls, the strong prior's habit), and every
#               first tool turn says the whole reading first, so the reading comes before the decision to call;
#   td11        --direct-think scene_chain --stage2-direct 6000: td's recipe (td8: 0.667 direct, but kappa 0 at K = 64).
# Then gpu_tail.sh's prior (48 episodes, K = 64) and perception on both draws. Returns results.tgz (logs, tables) and
# tail_NAME.tgz per build.
#   run(command="bash benchmarks/results/scene_view/chain_calls/gpu_chain_calls.sh", carry=[".whl"])
# START (a cold_start folder beside its sft_args.json), NATIVE_S (the native step's limit) and LIMIT_S may be set.
set -u
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start}
B=$OUT T="--grounded-think true --option-think true --presence-think true"
NAMES="tc50 tc25 td11"
tail_variant() {  # tail_variant NAME THINK...: gpu_tail.sh on START into $B/NAME, stopped at LIMIT_S with all it started
  local name=$1; shift; mkdir -p "$B/$name"
  OUT=$B/$name NATIVE_S=${NATIVE_S:-240} STARTS="$name:$START" THINK="$T $*" \
    timeout "${LIMIT_S:-540}" bash benchmarks/results/presence/gpu_tail.sh > "$B/$name/log.txt" 2>&1
}
tail_variant tc50 --direct-think scene_chain_calls --tool-on-visible 0.5 &
tail_variant tc25 --direct-think scene_chain_calls --tool-on-visible 0.25 &
tail_variant td11 --direct-think scene_chain --stage2-direct 6000 &
wait
for n in $NAMES; do
  echo "== $n"; grep -E "direct answers|tool gain|with tools \(|forbidden|show the answer|when they do|object F1 \(|strong \| 64" \
    "$B/$n/log.txt" | cut -c1-200
  mv "$B/$n"/tail_*.tgz "$B/" 2>/dev/null
  ls "$B/$n/tail" > /dev/null 2>&1 && cat "$B/$n"/tail/s*/summary.txt 2>/dev/null | head -40
done
tar czf "$B/results.tgz" -C "$B" $NAMES && rm -rf "${B:?}"/tc50 "${B:?}"/tc25 "${B:?}"/td11
ls -la "$B"
