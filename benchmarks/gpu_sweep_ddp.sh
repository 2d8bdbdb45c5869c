#!/usr/bin/env bash
# What produced benchmarks/results/gpu/ on a 2x H200 machine: a 15-step ablation (2 rows per GPU), PARA-GRPO
# over both GPUs with torchrun, and generation speed. M: a cold-start checkpoint (the run used the v2 strong one).
# --learning-rate 3e-5 --gating-budgets 4,8,16,32,64 were the trainer defaults when it ran.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
M=${M:-runs/ckpt/strong}; mkdir -p runs/g; OLD="--learning-rate 3e-5 --gating-budgets 4,8,16,32,64"
for p in "grpo,full:0" "anchoring,gating:1"; do rows=${p%%:*}; gpu=${p##*:}
  CUDA_VISIBLE_DEVICES=$gpu timeout 110 python3 trainers/sweep.py --rows $rows --out runs/g/sweep_gpu$gpu --strong-model $M --device cuda --total-steps 15 --subagent oracle $OLD --runs-dir runs/g/tb --eval-every 15 --eval-episodes 24 --no-progress > runs/g/sweep_gpu$gpu.log 2>&1 &
done; wait; echo "sweep $SECONDS"
timeout 50 torchrun --nproc_per_node=2 trainers/para_grpo.py --model $M --device cuda --total-steps 4 --eval-every 0 --subagent oracle $OLD --runs-dir runs/g/tb --exp-name ddp --no-progress > runs/g/ddp.log 2>&1; echo "ddp $SECONDS"
CUDA_VISIBLE_DEVICES=0 timeout 40 python3 benchmarks/speed_generation.py --checkpoint $M --device cuda --out runs/g/speed_generation_cuda > runs/g/speed.log 2>&1; echo "speed $SECONDS"
tar czf ${OUT:-runs/g}/g.tgz --exclude='*.safetensors' --exclude=checkpoints --exclude=final_model runs/g
tail -n 4 runs/g/*.log
