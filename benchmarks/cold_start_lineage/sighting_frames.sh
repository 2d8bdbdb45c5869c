#!/usr/bin/env bash
# Sighting drills that keep the overview's frames (trainers/sft.py --sighting-frames,
# agents.lmm.corpus.sighting_probe(frames=True)), mixed into a native step with full rows (tool traces, direct
# answers, captions, frames; 65 % of the traces and direct answers native), so the rest is trained beside the
# lookup. Overviews of K in {4, 8, 16}. Each variant of $VARIANTS ("name:flags|...") trains from $START side by side
# on one GPU until TRAIN_S seconds after the start (--stage2-fit). Then lib.sh's second_turn_checks
# (windows_check.py, second_turn_check.py, drill_check.py) and one build_NAME.tgz each.
#   bash benchmarks/cold_start_lineage/sighting_frames.sh
set -u
. benchmarks/cold_start_lineage/lib.sh
start_build
DATA="--preset gpu --tool-prior strong --init-from $START --budgets 4,8,16 --stage1-frame 0 --stage1-caption 0
  --stage1-direct 0 --stage1-tool 0 --stage1-steps 0 --stage2-native-traces 0.65 --native-think spread
  --native-close-think-p 0.3 --warmup 100 --grounded-think --option-think --presence-think
  --direct-think scene_chain_decide --search-agent sweep --oracle-fraction 0 --tool-families needle,needle_attribute
  --tool-on-visible 0.7 --zoom-think sighting --seed 27 --stage2-fresh
  --stage2-tool ${TOOL:-6000} --stage2-direct ${DIRECT:-2000} --stage2-frame ${FRAME:-1000}
  --stage2-caption ${CAPTION:-3000} --stage2-sighting ${N:-40000} --sighting-frames
  --device cuda --eval-every 0 --eval-frames 0 --eval-crops 0 --no-progress"
# ROWS_EPISODES=N: while the corpus renders, $START plays N train episodes at T = ${ROWS_T:-1.0} on the GPU (its own
# sub-agent) once per set of $ROWS_SETS ("name:families|...", families a comma list, empty for all; default "all:"),
# keeping the episodes of those families as rows in /tmp/rows_NAME, which a variant trains beside the rest with
# "--stage2-rows /tmp/rows_NAME": the forward KL to $START in data form. GPU_CHECK=1 also runs the kept-cache
# sampler tests on the GPU meanwhile ($R/gpu_check.log).
if [ -n "${ROWS_EPISODES:-}" ]; then
  IFS='|' read -r -a row_sets <<< "${ROWS_SETS:-all:}"
  for set in "${row_sets[@]}"; do
    python3 benchmarks/cold_start_lineage/self_distill.py --model "$START" --device cuda --out "/tmp/play_${set%%:*}" \
      --rows-out "/tmp/rows_${set%%:*}" --episodes "$ROWS_EPISODES" --pool 256 --temperature "${ROWS_T:-1.0}" \
      --keep all --families "${set#*:}" --eval-episodes 0 > "$R/rows_${set%%:*}.log" 2>&1 &
  done
fi
if [ -n "${GPU_CHECK:-}" ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_graph_decode.py tests/test_lmm.py \
    -k "graph or kept_cache or cuda or past_key" > "$R/gpu_check.log" 2>&1 &
fi
# shellcheck disable=SC2086  # DATA is a list of flags
python3 trainers/sft.py $DATA --stage2-steps 0 --workers 15 --out /tmp/corpus_only > "$R/corpus.log" 2>&1
wait
echo "corpus (and rows) done at $(( $(date +%s) - T0 )) s"
[ -n "${ROWS_EPISODES:-}" ] && for f in "$R"/rows_*.log; do echo "== $f"; grep '"episodes"' "$f" | cut -c1-300; done
[ -n "${GPU_CHECK:-}" ] && tail -3 "$R/gpu_check.log"
VARIANTS=${VARIANTS:-"fA:--batch-size 64 --batch-tokens 98304 --stage2-lr 1e-3|fB:--batch-size 64 --batch-tokens 98304 --stage2-lr 3e-4"}
fit_variants "$DATA" "${TRAIN_S:-430}"
# shellcheck disable=SC2086  # NAMES is a list of names
second_turn_checks /tmp/f $NAMES | tee -a "$OUT/lookup.txt"
# shellcheck disable=SC2086  # NAMES is a list of names
pack_builds /tmp/f $NAMES
echo "all done at $(( $(date +%s) - T0 )) s"
ls -la "$OUT"
