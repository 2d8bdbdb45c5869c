#!/bin/bash
# One device call: self_distill.py --native-revoice at two shares side by side on one GPU (greedy play of 2,048 train
# episodes each, the kept conversations partly said again in the native dialect), then for every variant the prior
# benchmark's strong rows (K = 64, greedy and T = 0.7) and the evaluation's draws on the README run's episodes 0-23.
# run(command="bash benchmarks/results/self_distill/revoice/gpu_revoice.sh", carry=[".whl"])
. benchmarks/results/presence/device_lib.sh && install_carried_wheels
SHARES=${SHARES:-"0.5 0.65"}
for s in $SHARES; do
  timeout "${DEADLINE_S:-330}" python3 benchmarks/results/self_distill/self_distill.py --out "/tmp/rv$s" --device cuda \
    --episodes 2048 --pool 256 --variants "${VARIANTS:-1e-4:150:0,1e-4:300:0}" --batch 32 --eval-episodes 120 \
    --native-revoice "$s" --no-start-eval 2>&1 | grep -v -E "Loading weights|Writing model|played|step [0-9]+/" > "$OUT/log_$s.txt" &
done
wait
for s in $SHARES; do
  for d in /tmp/rv$s/*/; do
    [ -d "$d/cold_start" ] || continue
    n=rv${s}_$(basename "$d")
    tar czf "$OUT/$n.tgz" -C "$d" cold_start
    timeout "${PRIOR_S:-90}" python3 benchmarks/prior.py --strong "$d/cold_start" --only strong \
      --settings greedy/K,t0.7/K --episodes 96 --device cuda --agreement-crops 0 --out "/tmp/prior_$n" > "/tmp/prior_$n.log" 2>&1 &
    MODELS="${MODELS:+$MODELS,}$d/cold_start"; NAMES="${NAMES:+$NAMES,}$n"
  done
done
python3 benchmarks/eval_draws.py --models "$MODELS" --names "$NAMES" --episodes 24 --draws "${DRAWS:-12}" --device cuda \
  --out /tmp/draws 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -12 > "$OUT/draws.txt"
wait
for f in /tmp/prior_rv*.md; do echo "== $f"; grep -E "^\| strong" "$f"; done > "$OUT/prior.txt" 2>&1
ls -la "$OUT"
