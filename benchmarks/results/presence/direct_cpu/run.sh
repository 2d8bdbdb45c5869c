#!/usr/bin/env bash
# Direct-answer drills with the presence chain against the overview (--direct-think presence) vs the plain grounded
# line (needle), from r12k, side by side on this 2-core CPU (one thread each, ~9 min of training each).
cd "$(git rev-parse --show-toplevel)" && . .venv/bin/activate
out=${1:?usage: run.sh OUT_DIR}  # from the r12k build, kept at .carry/presence/r12k (not in the repository)
run() {  # name direct-think
  python trainers/sft.py --init-from .carry/presence/r12k/cold_start --preset cpu --seed 1 --threads 1 \
    --caption-max-frames 16 --caption-aug-p 0.5 --stage1-frame 1000 --stage1-caption 2000 --stage1-direct 0 \
    --stage1-tool 0 --stage1-reading 1000 --stage1-direct-needle 2000 --oracle-fraction 0 --reading-oracle-fraction 0.2 \
    --grounded-think true --option-think true --presence-think true --direct-think $2 --stage1-steps 150 --stage1-lr 5e-5 \
    --stage2-steps 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --batch-size 32 --warmup 10 \
    --workers 1 --out $out/$1 > $out/$1.log 2>&1
  OMP_NUM_THREADS=1 python benchmarks/perception.py --checkpoint $out/$1/cold_start --frames 0 --crops 0 --env-default-crops 0 \
    --visible 40 --tool-episodes 48 --json $out/$1/perception.json > $out/$1.perc.log 2>&1
}
run presence presence &  # transcribe_presence was run the same way, alone, afterwards
run needle needle &
wait
echo ALLDONE
