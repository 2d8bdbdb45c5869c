#!/usr/bin/env bash
# The strong v10 chain after GPU call 1, on this 2-core CPU (the device could not be started): v9's last two
# steps replayed on top of caption mend C: 200 cold-start steps with 65 % native rollouts (v9's native step),
# then a 150-step caption mend on 16-frame crops half fitted from 64 px (shipped as strong v10); perception and
# prior. --budgets keeps the build's training K at 4..64: benchmarks/prior.py and perception.py read K from the
# last build's args, and the cpu preset's own budgets (4, 8) would have them measure at K = 8.
set -eu
C=${C:-runs/caption_mend/C}   # build C of gpu_call.sh (its cold_start folder inside)
OUT=${OUT:-benchmarks/results/caption_mend/cpu_chain}
mkdir -p $OUT
python benchmarks/cold_start_length.py --base-strong $C/cold_start --native-by trace --native-think spread \
  --episodes 96 --workers 2 --rollout-batch 48 --sft-args "--grounded-think true --option-think true --direct-think needle" \
  --native-shares 0.65 --lengths 200 --build-dir runs/caption_mend/native --out $OUT/native      # 297 s build + prior
N=$(ls -d runs/caption_mend/native/strong_L200_native0.65_*)
M="--preset cpu --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 --stage1-tool 0 --stage2-tool 0
   --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 150 --stage1-lr 5e-5
   --batch-size 32 --warmup 10 --workers 2 --eval-every 0 --budgets 4,8,16,32,64"
python trainers/sft.py $M --tool-prior strong --init-from $N/cold_start --caption-max-frames 16 --caption-aug-p 0.5 \
  --out runs/caption_mend/f16                                                                               # ~2 min
python benchmarks/perception.py --checkpoint $N/cold_start --frames 200 --crops 200 --env-default-crops 200 \
  --visible 40 --tool-episodes 48 --json $OUT/perc_native_L200.json
python benchmarks/perception.py --checkpoint runs/caption_mend/f16 --frames 200 --crops 200 --env-default-crops 200 \
  --visible 40 --tool-episodes 48 --json benchmarks/results/perception_v10_strong.json
python benchmarks/prior.py --only strong --strong runs/caption_mend/f16/cold_start --episodes 96 --out $OUT/prior_v10
