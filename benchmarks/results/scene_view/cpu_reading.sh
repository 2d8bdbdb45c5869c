#!/usr/bin/env bash
# This CPU: does the reading of tool responses come back when s3 (call 2) is mended with v13's presence reading drills
# and probes, the scene view kept by direct drills? Then perception, seed 0 (direct answers and tool gain).
#   bash benchmarks/results/scene_view/cpu_reading.sh .carry/sv/s3/cold_start /tmp/s3r
set -eu
START=$1 OUT_DIR=$2 R=benchmarks/results/scene_view/cpu_reading
python trainers/sft.py --preset cpu --tool-prior strong --init-from "$START" --out "$OUT_DIR" \
  --grounded-think true --option-think true --presence-think true --direct-think scene \
  --stage1-frame 1000 --stage1-caption 2000 --stage1-direct 0 --stage1-tool 0 --stage1-reading 3000 \
  --stage1-presence 8000 --reading-oracle-fraction 0.2 --drill-decisions false --stage1-direct-needle 1500 \
  --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 250 \
  --stage1-lr 1e-4 --batch-size 32 --warmup 10 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.7 \
  --oracle-fraction 0 --workers 2 --eval-every 0 > $R/mend.log 2>&1
cp "$OUT_DIR/sft_args.json" $R/sft_args.json
python benchmarks/perception.py --checkpoint "$OUT_DIR/cold_start" --frames 0 --crops 60 --env-default-crops 0 \
  --visible 40 --tool-episodes 96 --seed 0 --json $R/perc_s0.json > $R/perc_s0.log 2>&1
grep -E "object F1 \(|direct answers|\.\.\. (needle|global)|tool gain|calls/ep|show the answer|when they do" $R/perc_s0.md
