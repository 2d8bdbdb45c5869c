#!/usr/bin/env bash
# Ninth session, no device lent: does the grown weak v10 keep rising on this 2-core CPU? The d/ half of gpu_next.sh
# at CPU scale: v10's recipe (the data and think flags of its sft_args.json, given again below) on a new data draw
# (--seed 9), a smaller corpus, batch 32 at lr 1e-4 (v10's 3e-4 at batch 256, scaled by the square root of the
# batch), TRAIN_S seconds in all (corpus included). Then the direct answers on both perception draws.
# DIRECT_THINK (the direct answers' think form) may be set. The ninth session's two runs, the control and the
# presence chain after the compact list (scene_chain, which shipped as weak v11):
#   bash benchmarks/results/scene_view/grow/cpu_continue.sh
#   DIRECT_THINK=scene_chain R=benchmarks/results/scene_view/grow/cpu_chain bash benchmarks/results/scene_view/grow/cpu_continue.sh
set -eu
# START: weak v10 when these ran (at commit 7a92fcb: `git worktree add /tmp/v10 7a92fcb`, then
# START=/tmp/v10/agents/lmm/checkpoints/tiny-weak/cold_start); the default, the shipped weak, is v11 since
START=${START:-agents/lmm/checkpoints/tiny-weak/cold_start} LR=${LR:-1e-4} TRAIN_S=${TRAIN_S:-3000}
DIRECT_THINK=${DIRECT_THINK:-scene_compact}
R=${R:-benchmarks/results/scene_view/grow/cpu_continue}; B=/tmp/svt_$(basename "$R"); mkdir -p "$R"
python trainers/sft.py --preset cpu --device cpu --amp false --workers 2 --eval-every 0 --seed 9 \
  --tool-prior strong --init-from "$START" --out "$B" --time-budget-s "$TRAIN_S" \
  --grounded-think true --option-think true --presence-think true --direct-think "$DIRECT_THINK" \
  --caption-max-frames 16 --caption-aug-p 0.7 --reading-oracle-fraction 0.2 --oracle-fraction 0.0 \
  --stage1-frame 1000 --stage1-caption 2500 --stage1-direct 2000 --stage1-tool 0 --stage1-reading 2500 \
  --stage1-direct-needle 7000 --stage1-presence 9000 --stage1-steps 100000 --stage1-lr "$LR" --warmup 20 \
  --perception-warmup 0 \
  --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --batch-size 32 \
  > "$R/train.log" 2>&1
cp "$B/sft_args.json" "$R/sft_args.json"
for s in 0 1; do
  python benchmarks/perception.py --checkpoint "$B/cold_start" --frames 0 --crops 60 --env-default-crops 0 \
    --visible 80 --tool-episodes 0 --seed $s --json "$R/perc_s$s.json" > "$R/perc_s$s.log" 2>&1
done
grep -E "object F1 \(|direct answers|\.\.\. (needle|global)" "$R"/perc_s*.md
