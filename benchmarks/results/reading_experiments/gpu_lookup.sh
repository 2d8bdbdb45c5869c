#!/usr/bin/env bash
# Several lookup_probe.py runs side by side on one GPU (tiny models leave an H200 idle). Usage:
#   bash benchmarks/results/reading_experiments/gpu_lookup.sh OUT MINUTES 'NAME|CHECKPOINT|ARGS' ...
# (an empty CHECKPOINT: the shipped strong cold start; FORM=scene|scene1|... picks the probe form, multi by default). Each run gets 3 CPU threads and 3 pool workers; NAME.txt (the log) and NAME/ (the model) land in OUT.
out=$1 minutes=$2; shift 2
P=benchmarks/results/reading_experiments/lookup_probe.py
C=agents/lmm/checkpoints/tiny-strong/cold_start
mkdir -p "$out"
for spec in "$@"; do
  name=${spec%%|*} rest=${spec#*|}
  init=${rest%%|*} args=${rest#*|}
  # shellcheck disable=SC2086  # ARGS is a list of flags
  OMP_NUM_THREADS=3 MKL_NUM_THREADS=3 python $P ${init:-$C} "$out/$name" "$minutes" 0 "${FORM:-multi}" --device cuda \
    --batch-size 256 --pool 300000 --workers 3 --eval-every 500 --eval-objects 2,4,12 $args > "$out/$name.txt" 2>&1 &
done
wait
for d in "$out"/*/; do [ -d "$d" ] && tar -C "$out" -cf "${d%/}.tar" "$(basename "$d")" && rm -rf "$d"; done
