#!/usr/bin/env bash
# This CPU: a small caption mend of the v13 candidate (README section 7), aimed at the 64 px crops the public
# Subagent summarises, with presence reading drills (decisions untrained) and probes to hold the reading. Then the
# measures that section 7 compares: crops, default-env crops, direct answers, tool gain at n = 192 per arm.
#   bash benchmarks/results/presence/cpu_capmend.sh
set -eu
S=${1:-benchmarks/results/presence/v13_candidate/cold_start}
R=benchmarks/results/presence/v13_capmend; mkdir -p $R
python trainers/sft.py --preset cpu --device cpu --amp false --stage1-frame 2000 --stage1-caption 4000 \
  --stage1-reading 2000 --stage1-presence 5000 --reading-oracle-fraction 0.2 --drill-decisions false \
  --grounded-think true --option-think true --presence-think true --direct-think needle --oracle-fraction 0 \
  --stage1-direct 0 --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 \
  --stage2-steps 0 --stage1-steps 150 --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 2 --eval-every 0 \
  --caption-max-frames 16 --caption-aug-p 0.8 --tool-prior strong --init-from "$S" --out /tmp/v13cap
cp /tmp/v13cap/sft_args.json $R/sft_args.json
python benchmarks/perception.py --checkpoint /tmp/v13cap/cold_start --frames 0 --crops 200 --env-default-crops 200 \
  --visible 40 --tool-episodes 96 --device cpu --json $R/perc.json
