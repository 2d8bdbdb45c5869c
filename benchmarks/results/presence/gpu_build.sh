#!/usr/bin/env bash
# One device call (one H200): reading drills whose answer turn thinks the presence chain (--presence-think),
# continuing a strong cold start ($1, default the shipped one). Three variants side by side:
#   lr1e-4  600 stage-1 steps of batch 256 at lr 1e-4: 8,000 reading drills (80 % played by the scene agent, whose
#           crops list several objects), 4,000 frames, 12,000 crops
#   lr3e-4  the same at lr 3e-4 (another corpus seed)
#   probe   first 90 s of text-only presence probes (lookup_probe.py, curriculum 2 -> 4 -> 12 objects, lr 1e-3), then
#           lr1e-4's mend
# Then for each: perception (tool gain, reading after the oracle's calls) on the GPU, and reading after the scene
# and uniform agents' calls (reading_other_calls.py) on the CPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
R=$OUT/presence; mkdir -p $R
S=${1:-agents/lmm/checkpoints/tiny-strong/cold_start}
MEND="--preset gpu --amp false --stage1-frame 4000 --stage1-caption 12000 --stage1-direct 0 --stage1-tool 0
      --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 600
      --warmup 30 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.5 --workers 5 --time-budget-s 230
      --eval-every 0 --batch-size 256 --batch-tokens 49152 --tool-prior strong
      --stage1-reading 8000 --grounded-think true --option-think true --presence-think true --direct-think needle
      --oracle-fraction 0 --reading-oracle-fraction 0.2"
python3 trainers/sft.py $MEND --stage1-lr 1e-4 --init-from $S --out /tmp/m/lr1e-4 > $R/mend_lr1e-4.log 2>&1 &
python3 trainers/sft.py $MEND --stage1-lr 3e-4 --seed 2 --init-from $S --out /tmp/m/lr3e-4 > $R/mend_lr3e-4.log 2>&1 &
( OMP_NUM_THREADS=3 python3 benchmarks/results/reading_experiments/lookup_probe.py $S /tmp/probe 1.5 0 multi \
    --device cuda --think presence --text-forward eager --batch-size 512 --pool 100000 --workers 3 --eval-every 200 \
    --eval-objects 2,4,12 --lr 1e-3 --curriculum 2:400,4:400,12:100000 --advance-at 0.9 > $R/probe.log 2>&1
  cp $(dirname $S)/sft_args.json /tmp/probe/ 2>/dev/null
  python3 trainers/sft.py $MEND --stage1-lr 1e-4 --init-from /tmp/probe --out /tmp/m/probe --time-budget-s 200 \
    > $R/mend_probe.log 2>&1 ) &
wait
P="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"
for v in lr1e-4 lr3e-4 probe; do
  [ -d /tmp/m/$v/cold_start ] || continue
  python3 benchmarks/perception.py --checkpoint /tmp/m/$v/cold_start $P --json $R/perc_$v.json > $R/perc_$v.log 2>&1 &
  OMP_NUM_THREADS=4 python3 benchmarks/results/reading_experiments/reading_other_calls.py /tmp/m/$v/cold_start 48 \
    > $R/other_$v.txt 2>&1 &
done
wait
for v in lr1e-4 lr3e-4 probe; do
  echo "== $v"; grep -h "done in\|stage 1 step" $R/mend_$v.log | tail -2
  grep -E "single-frame object|crop object F1|direct answers|tool gain|calls/ep|reading|\.\.\. needle" $R/perc_$v.md
  grep "calls of" $R/other_$v.txt
done
grep "step\|stage" $R/probe.log | tail -4
tar czf $OUT/results.tgz -C $OUT presence
for v in lr1e-4 lr3e-4 probe; do [ -d /tmp/m/$v/cold_start ] && tar czf $OUT/$v.tgz -C /tmp/m $v/cold_start $v/sft_args.json; done
ls -la $OUT
