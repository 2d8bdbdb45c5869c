#!/bin/bash
# One device call: self_distill.py --native-revoice S --revoice-mode $MODE for each share of $SHARES side by side on
# one GPU (greedy play of 2,048 train episodes each, the kept conversations partly said again in the native dialect),
# then per variant the prior benchmark's strong rows (K = 64, greedy and T = 0.7) and the evaluation's draws on the
# README run's episodes 0-23 (GPU); with PERCEPTION=1 benchmarks/perception.py too, with README=1 the README's default
# run from it on the device's CPU (one core each, as `python trainers/para_grpo.py --model DIR`).
# As run (twenty-sixth session):
#   run(command="bash benchmarks/results/self_distill/revoice/gpu_revoice.sh", carry=[".whl"])  (replace mode)
#   run(command="MODE=add SHARES=1.0 VARIANTS=1e-4:500:0 EVAL_EPISODES=0 DRAWS=8 bash benchmarks/results/self_distill/revoice/gpu_revoice.sh", carry=[".whl"])
# (little device time was left for the second: its 0-119 evaluation, perception and README run ran on this CPU).
# START=DIR plays and fine-tunes from DIR instead of the shipped strong cold start (share 0 = plain sharpening);
# DIR itself is then evaluated beside the variants, as "start".
. benchmarks/results/presence/device_lib.sh && install_carried_wheels
MODE=${MODE:-replace}
SHARES=${SHARES:-"0.5 0.65"}
for s in $SHARES; do
  timeout "${DEADLINE_S:-330}" python3 benchmarks/results/self_distill/self_distill.py --out "/tmp/rv_$MODE$s" \
    --device cuda --episodes 2048 --pool 256 --variants "${VARIANTS:-1e-4:150:0,1e-4:300:0}" --batch 32 \
    --eval-episodes "${EVAL_EPISODES:-120}" --native-revoice "$s" --revoice-mode "$MODE" --no-start-eval ${START:+--model "$START"} 2>&1 \
    | grep -v -E "Loading weights|Writing model|played|step [0-9]+/" > "$OUT/log_$MODE$s.txt" &
done
wait
for s in $SHARES; do
  for d in /tmp/rv_$MODE$s/*/; do
    [ -d "$d/cold_start" ] || continue
    n=$MODE${s}_$(basename "$d")
    tar czf "$OUT/$n.tgz" -C "$d" cold_start
    timeout "${PRIOR_S:-100}" python3 benchmarks/prior.py --strong "$d/cold_start" --only strong \
      --settings greedy/K,t0.7/K --episodes 96 --device cuda --agreement-crops 0 --out "/tmp/prior_$n" > "/tmp/prior_$n.log" 2>&1 &
    [ "${PERCEPTION:-0}" = 1 ] && timeout 200 python3 benchmarks/perception.py --checkpoint "$d/cold_start" \
      --json "/tmp/perc_$n.json" --frames 200 --crops 200 --env-default-crops 64 --visible 40 --tool-episodes 48 \
      --device cuda > "/tmp/perc_$n.log" 2>&1 &
    [ "${README:-0}" = 1 ] && ( OMP_NUM_THREADS=1 timeout 270 python3 trainers/para_grpo.py --model "$d/cold_start" \
      --device cpu --runs-dir /tmp/runs --run-name "$n" > "/tmp/readme_$n.log" 2>&1 ) &
    MODELS="${MODELS:+$MODELS,}$d/cold_start"; NAMES="${NAMES:+$NAMES,}$n"
  done
done
[ -n "$START" ] && MODELS="$START,$MODELS" NAMES="start,$NAMES"
python3 benchmarks/eval_draws.py --models "$MODELS" --names "$NAMES" --episodes 24 --draws "${DRAWS:-12}" --device cuda \
  --out "$OUT/draws24" 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -12 > "$OUT/draws.txt"
# DRAWS120=N: the same models on episodes 0-119, N draws each (the shipping rule's episodes)
[ "${DRAWS120:-0}" -gt 0 ] && python3 benchmarks/eval_draws.py --models "$MODELS" --names "$NAMES" --episodes 120 \
  --draws "$DRAWS120" --device cuda --out "$OUT/draws120" 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -12 > "$OUT/draws120.txt"
wait
for f in /tmp/prior_"$MODE"*.md; do echo "== $f"; grep -E "^\| strong" "$f"; done > "$OUT/prior.txt" 2>&1
[ "${PERCEPTION:-0}" = 1 ] && for f in /tmp/perc_"$MODE"*.log; do echo "== $f"; tail -14 "$f"; done > "$OUT/perception.txt" 2>&1
[ "${README:-0}" = 1 ] && for f in /tmp/readme_"$MODE"*.log; do
  echo "== $f"; grep -E "step 12 of|eval at|train \(mean" "$f" || tail -3 "$f"; done > "$OUT/readme.txt" 2>&1
ls -la "$OUT"
