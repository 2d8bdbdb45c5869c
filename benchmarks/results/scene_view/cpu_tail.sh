#!/usr/bin/env bash
# This CPU (2 cores): v11's tail on the reading-mended scene-view build (s3r, cpu_reading.sh), as every shipped
# strong build ends: the native step (L = 300 cold-start steps, 65 % native rollouts, the scene view in its traces),
# then 150 caption-only steps at lr 5e-5. Does the strong prior's format decay under sampling come back, and what is
# left of the scene view and the reading? Then the prior contrast and perception, seed 0.
#   bash benchmarks/results/scene_view/cpu_tail.sh .carry/sv/s3r/cold_start
# L (the native step's cold-start steps), THINK (the build's think flags) and R (the results folder) may be set; the
# seventh session's short tail on the compact weak v9:
#   L=100 THINK="... --direct-think scene_compact" R=benchmarks/results/scene_view/cpu_tail_compact bash ... .carry/sv/wc/cold_start
set -eu
S=$1 L=${L:-300}
R=${R:-benchmarks/results/scene_view/cpu_tail}; mkdir -p $R
THINK=${THINK:-"--grounded-think true --option-think true --presence-think true --direct-think scene"}
B=/tmp/svt_$(basename "$R")
python benchmarks/cold_start_length.py --base-strong $S --native-by trace --native-think spread --episodes 48 \
  --device cpu --workers 2 --build-dir $B --sft-args "$THINK" --native-shares 0.65 --lengths $L \
  --out $R/native > $R/native.log 2>&1
python trainers/sft.py --preset cpu --device cpu --amp false --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 \
  --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 \
  --stage1-steps 150 --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 2 --eval-every 0 --caption-max-frames 16 \
  --caption-aug-p 0.5 --tool-prior strong --init-from "$(ls -d $B/strong_L"$L"*)/cold_start" --out $B/final \
  > $R/final.log 2>&1
cp $B/final/sft_args.json $R/final_sft_args.json
python benchmarks/prior.py --strong $B/final/cold_start --only strong --episodes 48 --out $R/prior > $R/prior.log 2>&1
python benchmarks/perception.py --checkpoint $B/final/cold_start --frames 0 --crops 60 --env-default-crops 0 \
  --visible 40 --tool-episodes 96 --seed 0 --json $R/perc_s0.json > $R/perc_s0.log 2>&1
grep -E "strong \| 64" $R/prior.md
grep -E "object F1 \(|direct answers|tool gain|with tools \(|forbidden|show the answer|when they do \|" $R/perc_s0.md
