#!/usr/bin/env bash
# Does PARA-GRPO raise accuracy once it gets a GPU's dose? (twenty-first session; results and reading in README.md)
# The README's default run is 12 steps of 16 rollouts, and nothing in reach of it moved accuracy on episodes 0-119.
# Here the same trainer from the shipped strong cold start runs side by side on one GPU, one process per RUNS entry
# ("name:trainer flags|..."), each until the call's deadline, evaluated on validation episodes 0-119 (T = 0.6, gated
# K in {4, 8, 16}, the default's evaluation) before training and every EVAL_EVERY steps, checkpointing at each
# evaluation. Returns results.tgz (every run's history.json, args.json and log) and the weights of the BEST runs
# (the highest last evaluation) as model_NAME.safetensors.
# Call 1: run(command="bash benchmarks/results/rl_dose/gpu_rl_dose.sh", carry=[".whl"], timeout_s=600): eight runs
#   at 15-20 s a step, none reached its first evaluation after step 0 within 500 s, so nothing came back.
# Call 2 (call2/): run(command="DEADLINE_S=470 EVAL_EVERY=20 BEST=1 RUNS='d:--seed 3|d:--seed 4|d:--seed 5|lr3e-5:
#   --learning-rate 3e-5 --seed 3' bash benchmarks/results/rl_dose/gpu_rl_dose.sh", carry=[".whl"], timeout_s=560)
set -u
T0=$(date +%s)
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
DEADLINE_S=${DEADLINE_S:-500}
EVAL_EVERY=${EVAL_EVERY:-40}
BEST=${BEST:-2}
DEVICE=${DEVICE:-cuda}; BACKEND=${BACKEND:-hf-graph}; EPISODES=${EPISODES:-120}  # a CPU smoke test sets these
RUNS=${RUNS:-"d:--seed 1|d:--seed 2|lr3e-5:--learning-rate 3e-5 --seed 1|lr3e-5:--learning-rate 3e-5 --seed 2|p4:--prompts-per-step 4 --seed 1|p4:--prompts-per-step 4 --seed 2|anchor0:--anchor-lambda 0 --penalty-gamma 0 --seed 1|lr3e-4:--learning-rate 3e-4 --seed 1"}
D=/tmp/rl_dose; mkdir -p "$D"
IFS='|' read -r -a specs <<< "$RUNS"
for spec in "${specs[@]}"; do
  name=${spec%%:*}; flags=${spec#*:}; seed=$(grep -o -- '--seed [0-9]*' <<< "$flags" | cut -d' ' -f2)
  run=${name}__s${seed:-1}
  # shellcheck disable=SC2086  # flags is a list of flags
  OMP_NUM_THREADS=1 timeout $((DEADLINE_S - ($(date +%s) - T0))) python3 trainers/para_grpo.py --device "$DEVICE" \
    --rollout-backend "$BACKEND" --total-steps 100000 --eval-every "$EVAL_EVERY" --checkpoint-every "$EVAL_EVERY" \
    --eval-episodes "$EPISODES" --eval-samples 0 --no-progress $flags --runs-dir "$D" --run-name "$run" > "$D/$run.log" 2>&1 &
done
wait
echo "runs stopped at $(( $(date +%s) - T0 )) s"
python3 - "$D" "$OUT" "$BEST" <<'PY'
import glob, json, os, sys, tarfile
import torch
from safetensors.torch import save_file

d, out, best = sys.argv[1], sys.argv[2], int(sys.argv[3])
last = {}
for hist in sorted(glob.glob(f"{d}/*/history.json")):
    run = os.path.basename(os.path.dirname(hist))
    evals = [(h["step"], h["eval/accuracy"], h.get("eval/format_reward_common"), h.get("eval/tool_calls_per_rollout"))
             for h in json.load(open(hist)) if "eval/accuracy" in h]
    print(run, " ".join(f"{s}:{a:.3f}/{f:.2f}/{c:.2f}" for s, a, f, c in evals))
    if len(evals) > 1:
        last[run] = evals[-1][1]
with tarfile.open(f"{out}/results.tgz", "w:gz") as tar:
    for f in glob.glob(f"{d}/*.log") + glob.glob(f"{d}/*/history.json") + glob.glob(f"{d}/*/args.json"):
        tar.add(f, arcname=os.path.relpath(f, d))
for run in sorted(last, key=last.get, reverse=True)[:best]:
    ck = sorted(glob.glob(f"{d}/{run}/checkpoints/step_*.pt"), key=lambda p: int(p.split("_")[-1][:-3]))[-1]
    state = torch.load(ck, map_location="cpu", weights_only=False)["model"]
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, f"{out}/model_{run}.safetensors")
    print("weights of", run, "from", os.path.basename(ck))
PY
echo "all done at $(( $(date +%s) - T0 )) s"
