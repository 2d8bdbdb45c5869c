#!/usr/bin/env bash
# What the builds of gpu_sighting_frames.sh (carried in .carry/sf/NAME/cold_start) do where item 6 and 7 of issue 9
# are judged, in one device call: the prior benchmark's strong rows (K = 64, greedy and T = 0.7: is the strong prior's
# format break kept?), the default run's evaluation replayed over generation draws on validation 0-23 and 0-119 beside
# v15 (benchmarks/eval_draws.py, on the GPU; DRAWS24=0 skips 0-23), the README's default run from each build on the
# device's CPU, and with PERCEIVE="NAME ..." benchmarks/perception.py at its defaults for those builds.
#   run(command="bash benchmarks/results/scene_view/lookup_form/gpu_sighting_frames_eval.sh", carry=[".whl", ".carry/sf"])
set -u
T0=$(date +%s)
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
NAMES=${NAMES:-"fA fB"}
MODELS=agents/lmm/checkpoints/tiny-strong/cold_start; LABELS=v15
for n in $NAMES; do
  m=.carry/sf/$n/cold_start; MODELS="$MODELS,$m"; LABELS="$LABELS,$n"
  timeout 300 python3 benchmarks/prior.py --strong "$m" --only strong --settings greedy/K,t0.7/K --episodes 96 \
    --device cuda --agreement-crops 0 --out "/tmp/prior_$n" > "/tmp/prior_$n.log" 2>&1 &
  ( OMP_NUM_THREADS=1 timeout 330 python3 trainers/para_grpo.py --model "$m" --device cpu --runs-dir /tmp/runs \
    --run-name "$n" > "/tmp/readme_$n.log" 2>&1 ) &
done
[ "${DRAWS24:-12}" -gt 0 ] && timeout 420 python3 benchmarks/eval_draws.py --models "$MODELS" --names "$LABELS" \
  --episodes 24 --draws "${DRAWS24:-12}" --device cuda --out "$OUT/readme24" > /tmp/draws24.log 2>&1 &
for n in ${PERCEIVE:-}; do  # benchmarks/perception.py at its defaults (item 4's sample sizes), on the GPU
  timeout 450 python3 benchmarks/perception.py --checkpoint ".carry/sf/$n/cold_start" --device cuda \
    --json "$OUT/perception_$n.json" > "/tmp/perc_$n.log" 2>&1 &
done
timeout 420 python3 benchmarks/eval_draws.py --models "$MODELS" --names "$LABELS" --episodes 120 --draws "${DRAWS120:-4}" \
  --device cuda --out "$OUT/val120" > /tmp/draws120.log 2>&1 &
wait
{
  for n in $NAMES; do
    echo "== prior $n"; grep -E "^\| strong" "/tmp/prior_$n.md" || tail -3 "/tmp/prior_$n.log"
    echo "== README run $n"; grep -E "step 12 of|eval at|train \(mean" "/tmp/readme_$n.log" || tail -3 "/tmp/readme_$n.log"
  done
  for n in ${PERCEIVE:-}; do echo "== perception $n"; tail -14 "/tmp/perc_$n.log"; done
  echo "== draws"; tail -3 /tmp/draws24.log /tmp/draws120.log
  echo "all done at $(( $(date +%s) - T0 )) s"
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
