#!/usr/bin/env bash
# This CPU (2 cores): v12's tail on longdirect (README section 6: direct answers 0.558, but no calls). The native
# step (L = 300, 65 % native rollouts) brought the calls back after v12's drill mend; does it here, and what does it
# leave of the direct answers? Then 150 caption-only steps at lr 5e-5 and the tool measures at n = 192 per arm.
#   bash benchmarks/results/presence/cpu_native.sh [.carry/longdirect/cold_start]
set -eu
S=${1:-.carry/longdirect/cold_start}
R=benchmarks/results/presence/native_cpu; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
python benchmarks/cold_start_length.py --base-strong $S --native-by trace --native-think spread --episodes 48 \
  --device cpu --workers 2 --build-dir /tmp/nc --sft-args "$THINK" --native-shares 0.65 --lengths 300 --out $R/native
python trainers/sft.py --preset cpu --device cpu --amp false --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 \
  --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 \
  --stage1-steps 150 --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 2 --eval-every 0 --caption-max-frames 16 \
  --caption-aug-p 0.5 --tool-prior strong --init-from "$(ls -d /tmp/nc/strong_L300*)/cold_start" --out /tmp/ncf
cp /tmp/ncf/sft_args.json $R/final_sft_args.json
python benchmarks/perception.py --checkpoint /tmp/ncf/cold_start --frames 0 --crops 0 --env-default-crops 200 \
  --visible 40 --tool-episodes 96 --device cpu --json $R/perc.json
