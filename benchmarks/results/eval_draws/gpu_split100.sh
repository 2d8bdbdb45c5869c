#!/bin/bash
# One device call: rebuild the `split` PIN 100 candidate (../self_distill/ section 5) on the GPU, then the README's
# default run from it on the device's CPU (as `python trainers/para_grpo.py --model DIR`), and the evaluation's draws
# (benchmarks/eval_draws.py, episodes 0-23) of the candidate and of the run's final model on the GPU.
# run(command="bash benchmarks/results/eval_draws/gpu_split100.sh", carry=[".whl"])
. benchmarks/results/presence/device_lib.sh && install_carried_wheels
python3 benchmarks/results/self_distill/self_distill.py --out /tmp/sd --device cuda --episodes 2048 --pool 256 \
  --variants 1e-4:100:100 --batch 32 --eval-episodes 0 --openers split 2>&1 | grep -v -E "Loading|Writing|played" | tail -3
M=/tmp/sd/1e-4_100_100/cold_start
( OMP_NUM_THREADS=1 python3 trainers/para_grpo.py --model "$M" --device cpu --runs-dir /tmp/runs \
  --run-name split100 > "$OUT/readme_run.log" 2>&1; echo "readme run rc $?" >> "$OUT/readme_run.log" ) &
python3 benchmarks/eval_draws.py --models "$M" --names split100 --episodes 24 --draws "${DRAWS:-16}" --device cuda \
  --out "$OUT/split100_start" 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -8
wait
grep -E "eval at|step 12 of" "$OUT/readme_run.log"
python3 benchmarks/eval_draws.py --models /tmp/runs/split100/final_model --names split100_after --episodes 24 \
  --draws "${DRAWS:-16}" --device cuda --out "$OUT/split100_after" 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -8
python3 benchmarks/eval_draws.py --models agents/lmm/checkpoints/tiny-strong/cold_start --names v15 --episodes 24 \
  --draws "${DRAWS:-16}" --device cuda --out "$OUT/v15_gpu" 2>&1 | grep -v -E "Loading|it/s|s/it" | tail -8
ls -la "$OUT"
