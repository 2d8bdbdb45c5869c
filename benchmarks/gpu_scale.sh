#!/usr/bin/env bash
# The GPU measurements of docs/scaling.md on a 2-GPU host (2x H200: ~9 minutes):
#   1. one GPU each, side by side: rollout generation at the Qwen2.5-VL-3B/-7B language-model shapes,
#      stock vs static-cache compiled (GPU 0); PARA-GRPO vs TRL's GRPOTrainer, then the fast path,
#      on the tiny model (GPU 1);
#   2. FSDP2 GRPO steps over both GPUs at the 7B and 3B shapes.
# Results go to $R (default benchmarks/results/gpu), logs to runs/gpu/; needs transformers 5.24 or later and trl
# (+ datasets): pip install -e ".[all]".
set -u
R=${R:-benchmarks/results/gpu}
mkdir -p "$R" runs/gpu
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
CUDA_VISIBLE_DEVICES=0 timeout ${GEN_SECONDS:-290} $PY benchmarks/speed_generation_scale.py --shapes 3b,7b --caches dynamic,graph,graph-compiled \
  --repeats 1 --out "$R/speed_generation_scale" > runs/gpu/speed_generation_scale.log 2>&1 &
( CUDA_VISIBLE_DEVICES=1 timeout ${TRL_SECONDS:-170} $PY benchmarks/speed_trl.py --steps 4 --rounds 2 \
    --out "$R/speed_trl" > runs/gpu/speed_trl.log 2>&1
  CUDA_VISIBLE_DEVICES=1 timeout ${FAST_SECONDS:-110} $PY benchmarks/speed_fast_path.py --device cuda --repeats 2 \
    --out "$R" > runs/gpu/speed_fast_path.log 2>&1 ) &
wait
echo "one-GPU benchmarks done at $SECONDS s"
timeout ${FSDP7_SECONDS:-150} torchrun --nproc_per_node=2 benchmarks/scale_fsdp.py --shape 7b --prompts 2,8 --steps 2 \
  --new-tokens 256 --out "$R/scale_fsdp_7b" > runs/gpu/scale_fsdp_7b.log 2>&1
echo "7b done at $SECONDS s"
timeout ${FSDP3_SECONDS:-110} torchrun --nproc_per_node=2 benchmarks/scale_fsdp.py --shape 3b --prompts 8 --steps 2 \
  --new-tokens 256 --out "$R/scale_fsdp_3b" > runs/gpu/scale_fsdp_3b.log 2>&1
echo "all done at $SECONDS s"
