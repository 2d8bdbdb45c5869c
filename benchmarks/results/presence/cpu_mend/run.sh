#!/usr/bin/env bash
# The CPU mend of the r12k build (this machine, 494 s of training): 150 steps of batch 32 at lr 5e-5 with direct answers
# of every family (1,000), presence reading drills (2,000), frames and 16-frame crops; then perception and the prior.
set -x
cd "$(git rev-parse --show-toplevel)" && . .venv/bin/activate
out=${1:?usage: run.sh OUT_DIR}  # from the r12k build, kept at .carry/presence/r12k (not in the repository)
python trainers/sft.py --init-from .carry/presence/r12k/cold_start --preset cpu --seed 1 \
  --caption-max-frames 16 --caption-aug-p 0.5 --stage1-frame 1000 --stage1-caption 2000 --stage1-direct 1000 \
  --stage1-tool 0 --stage1-reading 2000 --oracle-fraction 0 --reading-oracle-fraction 0.2 \
  --grounded-think true --option-think true --presence-think true --direct-think needle --stage1-steps 150 --stage1-lr 5e-5 \
  --stage2-steps 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --batch-size 32 --warmup 10 \
  --out $out 
python benchmarks/perception.py --checkpoint $out/cold_start --frames 200 --crops 200 --env-default-crops 200 \
  --visible 40 --tool-episodes 48 --json $out/perception.json 
python benchmarks/prior.py --strong $out/cold_start --only strong --settings greedy/K,t0.7/K --episodes 96 \
  --agreement-crops 0 --out $out/prior 
echo ALLDONE
