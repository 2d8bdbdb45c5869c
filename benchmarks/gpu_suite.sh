#!/usr/bin/env bash
# The GPU runs behind the README's GPU numbers, in one call on a 2x H200 machine:
#   1. SFT build of the strong- and weak-prior tiny models (gpu preset), one per GPU;
#   2. the prior benchmark of each, and the ablation sweep from the strong model (2 rows per GPU);
#   3. PARA-GRPO data-parallel over both GPUs with torchrun; 4. generation speed on one GPU.
# Outputs go under runs/gpu/ and are packed into $OUT.
set -u
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true  # corpus workers pass tensors through shared memory
OUT=${OUT:-runs/gpu/out}; mkdir -p runs/gpu "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
for p in strong:0 weak:1; do
  prior=${p%%:*}; gpu=${p##*:}
  CUDA_VISIBLE_DEVICES=$gpu timeout ${SFT_SECONDS:-240} $PY trainers/sft.py --preset gpu --device cuda \
    --tool-prior $prior --out runs/gpu/tiny-$prior --runs-dir runs/gpu/tb --progress false \
    --stage1-steps ${STAGE1_STEPS:-1500} > runs/gpu/sft_$prior.log 2>&1 &
done
wait
echo "sft done at $SECONDS s"
MODEL=runs/gpu/tiny-strong/cold_start
for p in strong:0 weak:1; do
  prior=${p%%:*}; gpu=${p##*:}
  CUDA_VISIBLE_DEVICES=$gpu timeout ${PRIOR_SECONDS:-100} $PY benchmarks/prior.py --only $prior \
    --$prior runs/gpu/tiny-$prior --device cuda --episodes ${EPISODES:-96} --agreement-crops 64 \
    --out runs/gpu/prior_$prior > runs/gpu/prior_$prior.log 2>&1 &
done
for p in "grpo,full:0" "anchoring,gating:1"; do
  rows=${p%%:*}; gpu=${p##*:}
  CUDA_VISIBLE_DEVICES=$gpu timeout ${SWEEP_SECONDS:-170} $PY trainers/sweep.py --rows $rows \
    --out runs/gpu/sweep_gpu$gpu --model $MODEL --device cuda --total-steps ${STEPS:-20} --subagent oracle \
    --runs-dir runs/gpu/tb --eval-every 10 --eval-episodes 24 --no-progress > runs/gpu/sweep_gpu$gpu.log 2>&1 &
done
wait
echo "prior + sweep done at $SECONDS s"
timeout ${DDP_SECONDS:-60} torchrun --nproc_per_node=2 trainers/para_grpo.py --model $MODEL --device cuda \
  --total-steps 4 --eval-every 0 --subagent oracle --runs-dir runs/gpu/tb --exp-name ddp --no-progress \
  > runs/gpu/ddp.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout ${SPEED_SECONDS:-40} $PY benchmarks/speed_generation.py --checkpoint $MODEL \
  --device cuda --out runs/gpu/speed_generation_cuda > runs/gpu/speed.log 2>&1
echo "all done at $SECONDS s"
tar czf "$OUT/results.tgz" --exclude='*.safetensors' --exclude='checkpoints' --exclude='final_model' \
  runs/gpu/*.log runs/gpu/prior_* runs/gpu/sweep_* runs/gpu/speed_* runs/gpu/tb runs/gpu/tiny-*/sft_args.json 2>/dev/null
for p in strong weak; do
  [ -d runs/gpu/tiny-$p/cold_start ] && tar czf "$OUT/tiny-$p.tgz" -C runs/gpu tiny-$p/cold_start tiny-$p/sft_args.json
done
ls -la "$OUT"; tail -n 3 runs/gpu/*.log
