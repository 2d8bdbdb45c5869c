#!/usr/bin/env bash
# The seeing agent's GPU work in one call on a 2x H200 machine (~9.5 minutes):
#   1. SFT of the strong- and weak-prior tiny models (gpu preset), one per GPU, continuing from INIT
#      (default: the shipped cold starts; give the last build's `DIR/{prior}/cold_start` to go on);
#   2. perception (benchmarks/perception.py) of each new cold start on its GPU, then the fast-path
#      benchmark (stock vs fast, SFT and GRPO steps) on GPU 0 and the tool-prior benchmark of both on GPU 1.
# Logs and results go under runs/gpu/; $OUT receives build.tgz (the new cold starts), base.tgz (their
# stage-1 weights) and results.tgz (perception, prior and fast-path results, logs, TensorBoard). SFT_ARGS adds flags to sft.py.
# The default timeouts add up to 590 s, inside one 10-minute device call.
set -u
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true  # corpus workers pass tensors through shared memory
OUT=${OUT:-runs/gpu/out}; BUILD=${BUILD:-runs/gpu/build}; INIT=${INIT:-shipped}; R=runs/gpu/results
mkdir -p runs/gpu "$R" "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
timeout ${SFT_SECONDS:-380} $PY trainers/sft.py --preset gpu --tool-prior both --init-from "$INIT" \
  --perception-warmup ${WARMUP:-0.2} --time-budget-s $(( ${SFT_SECONDS:-380} - 20 )) ${SFT_ARGS:-} --out "$BUILD" \
  --runs-dir runs/gpu/tb --progress false > runs/gpu/sft.log 2>&1
echo "sft done at $SECONDS s"
for p in strong:0 weak:1; do
  prior=${p%%:*}; gpu=${p##*:}
  CUDA_VISIBLE_DEVICES=$gpu timeout ${PERCEPTION_SECONDS:-110} $PY benchmarks/perception.py --device cuda \
    --checkpoint "$BUILD/$prior/cold_start" --json "$R/perception_$prior.json" --batch-size 256 \
    --frames 200 --crops 200 --env-default-crops 64 --visible 40 --tool-episodes 48 \
    > runs/gpu/perception_$prior.log 2>&1 &
done
wait
echo "perception done at $SECONDS s"
[ "${FAST_SECONDS:-90}" -gt 0 ] && CUDA_VISIBLE_DEVICES=0 timeout ${FAST_SECONDS:-90} $PY benchmarks/speed_fast_path.py \
  --device cuda --batch 256 --grpo-batch 64 --repeats 2 --out "$R" > runs/gpu/speed_fast_path.log 2>&1 &
# (its default batches, 256,1024 and 256 prompts, ran past 90 s; batch 256 / 64 prompts took 56 s on an H200)
CUDA_VISIBLE_DEVICES=1 timeout ${PRIOR_SECONDS:-90} $PY benchmarks/prior.py --device cuda \
  --strong "$BUILD/strong/cold_start" --weak "$BUILD/weak/cold_start" --episodes 48 --out "$R/prior" \
  > runs/gpu/prior.log 2>&1 &
wait
echo "all done at $SECONDS s"
tar czf "$OUT/build.tgz" -C "$BUILD" strong/cold_start weak/cold_start strong/sft_args.json weak/sft_args.json 2>/dev/null
tar czf "$OUT/base.tgz" -C "$BUILD" strong/base weak/base 2>/dev/null  # after stage 1: what stage 2 starts from
tar czf "$OUT/results.tgz" "$R" runs/gpu/*.log runs/gpu/tb 2>/dev/null
ls -la "$OUT"; tail -n 3 runs/gpu/*.log
