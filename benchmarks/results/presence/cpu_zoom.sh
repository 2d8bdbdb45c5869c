#!/usr/bin/env bash
# This CPU: zoom-played presence reading drills, then v11's native step on zoom traces, then the caption tail, from
# the shipped strong v13 (README section 8's untried pairing, at CPU size). zoom_call/ changed only the native step,
# so its reading drills were still the scene agent's; here both are the zoom agent's. Then the tool rows on both draws.
#   bash benchmarks/results/presence/cpu_zoom.sh [START_COLD_START]
set -eu
S=${1:-agents/lmm/checkpoints/tiny-strong/cold_start}
R=benchmarks/results/presence/zoom_cpu; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
python trainers/sft.py --preset cpu --device cpu --amp false --stage1-frame 1000 --stage1-caption 2000 \
  --stage1-reading 3000 --stage1-presence 5000 --reading-oracle-fraction 0.2 --drill-decisions false \
  $THINK --search-agent zoom --oracle-fraction 0 \
  --stage1-direct 0 --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 \
  --stage2-steps 0 --stage1-steps 200 --stage1-lr 1e-4 --batch-size 32 --warmup 10 --workers 2 --eval-every 0 \
  --caption-max-frames 16 --caption-aug-p 0.8 --tool-prior strong --init-from "$S" --out /tmp/zc_mend
python benchmarks/cold_start_length.py --base-strong /tmp/zc_mend/cold_start --native-by trace --native-think spread \
  --episodes 48 --device cpu --workers 2 --build-dir /tmp/zc_native --sft-args "$THINK --search-agent zoom" \
  --native-shares 0.65 --lengths 300 --out $R/native
python trainers/sft.py --preset cpu --device cpu --amp false --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 \
  --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 \
  --stage1-steps 150 --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 2 --eval-every 0 --caption-max-frames 16 \
  --caption-aug-p 0.5 --tool-prior strong --init-from "$(ls -d /tmp/zc_native/strong_L300*)/cold_start" --out /tmp/zc_final
cp /tmp/zc_mend/sft_args.json $R/mend_sft_args.json
cp /tmp/zc_final/sft_args.json $R/final_sft_args.json
for s in 0 1; do
  python benchmarks/perception.py --checkpoint /tmp/zc_final/cold_start --frames 0 --crops 0 --env-default-crops 0 \
    --visible 0 --tool-episodes 96 --seed $s --device cpu --json $R/perc_s$s.json
done
