#!/bin/bash
# One device call: self_distill.py on the GPU, each variant's checkpoint packed into $OUT, then the prior benchmark's
# strong rows (fixed K, greedy and T = 0.7, 96 episodes) for each variant, appended to the log.
# run(command="DEADLINE_S=400 VARIANTS=1e-4:100:10,1e-4:50:10 bash benchmarks/results/self_distill/gpu_self_distill.sh", carry=[".whl"])
# EXTRA passes more flags to self_distill.py, e.g. EXTRA="--openers split".
. benchmarks/results/presence/device_lib.sh && install_carried_wheels
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
timeout "${DEADLINE_S:-400}" python3 benchmarks/results/self_distill/self_distill.py --out /tmp/sd --device cuda \
  --episodes "${EPISODES:-2048}" --pool "${POOL:-256}" --variants "$VARIANTS" --batch "${BATCH:-32}" \
  --eval-episodes "${EVAL_EPISODES:-120}" ${EXTRA:-} 2>&1 | grep -v -E "Loading weights|Writing model" | tee "$OUT/log.txt"
# PERCEPTION=<variant>: benchmarks/perception.py (the README's item-4 settings) on that variant, beside the prior runs
if [ -n "${PERCEPTION:-}" ] && [ -d "/tmp/sd/$PERCEPTION/cold_start" ]; then
  python3 benchmarks/perception.py --checkpoint "/tmp/sd/$PERCEPTION/cold_start" --json "$OUT/perception_$PERCEPTION.json" \
    --frames 200 --crops 200 --env-default-crops 64 --visible 40 --tool-episodes 48 --device cuda \
    > "/tmp/perception.log" 2>&1 &
fi
[ -n "${BASELINE:-}" ] && mkdir -p /tmp/sd/start && ln -sfn "$PWD/agents/lmm/checkpoints/tiny-strong/cold_start" /tmp/sd/start/cold_start
for d in /tmp/sd/*/; do
  [ -d "$d/cold_start" ] || continue
  n=$(basename "$d")
  [ "$n" = start ] || tar czf "$OUT/$n.tgz" -C /tmp/sd "$n"
  timeout "${PRIOR_S:-60}" python3 benchmarks/prior.py --strong "$d/cold_start" --only strong --settings greedy/K,t0.7/K \
    --episodes 96 --device cuda --agreement-crops 0 --out "/tmp/prior_$n" > "/tmp/prior_$n.log" 2>&1
  { echo "== prior $n"; grep -E "^\| strong" "/tmp/prior_$n.md" 2>/dev/null || tail -3 "/tmp/prior_$n.log"; } | tee -a "$OUT/log.txt"
done
wait
tail -5 /tmp/perception.log 2>/dev/null | tee -a "$OUT/log.txt"
cp /tmp/sd/report.json "$OUT/" 2>/dev/null
ls -la "$OUT"
