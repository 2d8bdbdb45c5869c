#!/usr/bin/env bash
# The refused call 2 of the eighth session, for the next device session (one H200, about 560 s), in the ninth
# session's form (the direct answers think scene_chain, weak v11's): side by side,
#   t/  v11's tail with 6,000 native direct rollouts (td's recipe) on a grown build (START, default the shipped weak,
#       v11): a strong candidate whose extra layers may keep the direct answers and the reading of its own crops;
#   d/  the shipped weak continued on a new data draw at two learning rates, at a GPU's dose (v11 had 652 CPU steps
#       of batch 32 in the chain form: does it keep rising?).
#   run(command="bash benchmarks/results/scene_view/grow/gpu_next.sh", carry=[".whl"])
# START (a cold_start folder beside its sft_args.json) and DRAW (the continuation's data --seed) may be set.
set -u
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start}
B=$OUT; mkdir -p "$B/t" "$B/d"
(OUT=$B/t NATIVE_S=280 STARTS="td11:$START" \
  THINK="--grounded-think true --option-think true --presence-think true --direct-think scene_chain --stage2-direct 6000" \
  bash benchmarks/results/presence/gpu_tail.sh > "$B/t/log.txt" 2>&1) &
(OUT=$B/d TRAIN_S=400 PERC_S=120 TOOL_ROWS=0 DIRECT_THINK=scene_chain EXTRA_ARGS="--seed ${DRAW:-11}" \
  DOSE_VARIANTS="w11c:$START:3e-4 w11l:$START:1.5e-4" \
  bash benchmarks/results/scene_view/gpu_dose.sh > "$B/d/log.txt" 2>&1) &
wait
grep -E "^==|direct answers|tool gain|with tools \(|forbidden|show the answer|when they do|object F1 \(|strong \| 64|done in" \
  "$B/t/log.txt" "$B/d/log.txt" | cut -c1-200
