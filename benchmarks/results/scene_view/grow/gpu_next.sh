#!/usr/bin/env bash
# The refused call 2 of the eighth session, for the next device session (one H200, about 560 s): side by side,
#   t/  v11's tail with 6,000 native direct rollouts (td's recipe) on a grown build (START, default the weak v10):
#       a strong candidate whose extra layers may keep the direct answers and the reading of its own crops together;
#   d/  the weak v10 continued on a new data draw at two learning rates (does the grown model keep rising?).
#   run(command="bash benchmarks/results/scene_view/grow/gpu_next.sh", carry=[".whl"])
# START (a cold_start folder beside its sft_args.json) and DRAW (the continuation's data --seed) may be set.
set -u
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start}
B=$OUT; mkdir -p "$B/t" "$B/d"
(OUT=$B/t NATIVE_S=280 STARTS="td8:$START" \
  THINK="--grounded-think true --option-think true --presence-think true --direct-think scene_compact --stage2-direct 6000" \
  bash benchmarks/results/presence/gpu_tail.sh > "$B/t/log.txt" 2>&1) &
(OUT=$B/d TRAIN_S=400 PERC_S=120 TOOL_ROWS=0 DIRECT_THINK=scene_compact EXTRA_ARGS="--seed ${DRAW:-9}" \
  DOSE_VARIANTS="w8c:$START:3e-4 w8l:$START:1.5e-4" \
  bash benchmarks/results/scene_view/gpu_dose.sh > "$B/d/log.txt" 2>&1) &
wait
grep -E "^==|direct answers|tool gain|with tools \(|forbidden|show the answer|when they do|object F1 \(|strong \| 64|done in" \
  "$B/t/log.txt" "$B/d/log.txt" | cut -c1-200
