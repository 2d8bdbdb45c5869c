#!/usr/bin/env bash
# One device call (one H200): caption mends of the shipped cold starts aimed at the crops a default env hands
# the public Subagent (64 px frames fitted to 56, 16 frames per crop); then perception and the tool prior of each.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
mkdir -p $OUT/call1
S=agents/lmm/checkpoints/tiny-strong/cold_start
W=agents/lmm/checkpoints/tiny-weak/cold_start
MEND="--preset gpu --amp false --stage1-frame 6000 --stage1-caption 36000 --stage1-direct 0 --stage1-tool 0
      --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps ${STEPS:-800}
      --warmup 50 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.5 --workers 4 --time-budget-s 330
      --eval-every 0 --batch-size 256 --batch-tokens 49152"
DRILLS="--stage1-reading 8000 --stage1-direct-needle 8000 --grounded-think true --option-think true --direct-think needle
        --oracle-fraction 0 --reading-oracle-fraction 0.2"
python3 trainers/sft.py $MEND --tool-prior strong --init-from $S --stage1-lr 1e-4 --out /tmp/m/A > $OUT/call1/A.log 2>&1 &
python3 trainers/sft.py $MEND --tool-prior strong --init-from $S --stage1-lr 3e-4 --out /tmp/m/C --seed 2 > $OUT/call1/C.log 2>&1 &
python3 trainers/sft.py $MEND $DRILLS --tool-prior strong --init-from $S --stage1-lr 1e-4 --out /tmp/m/D > $OUT/call1/D.log 2>&1 &
python3 trainers/sft.py $MEND --tool-prior weak --init-from $W --stage1-lr 1e-4 --out /tmp/m/W > $OUT/call1/W.log 2>&1 &
P="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"
python3 benchmarks/perception.py --checkpoint $S $P --json $OUT/call1/perc_v9.json > $OUT/call1/perc_v9.log 2>&1
python3 benchmarks/perception.py --checkpoint $W $P --json $OUT/call1/perc_w6.json > $OUT/call1/perc_w6.log 2>&1
wait
for v in A C D W; do
  python3 benchmarks/perception.py --checkpoint /tmp/m/$v $P --json $OUT/call1/perc_$v.json > $OUT/call1/perc_$v.log 2>&1 &
  if [ $v = W ]; then only="--only weak --weak /tmp/m/W/cold_start"; else only="--only strong --strong /tmp/m/$v/cold_start"; fi
  python3 benchmarks/prior.py $only --episodes 96 --device cuda --settings greedy/K,t0.7/K --out $OUT/call1/prior_$v \
    > $OUT/call1/prior_$v.log 2>&1 &
done
wait
for f in $OUT/call1/perc_*.md; do echo "== $f"; grep -E "single-frame object|crop object F1|direct answers|tool gain|reading" $f; done
for f in $OUT/call1/prior_*.md; do echo "== $f"; head -20 $f; done
tail -3 $OUT/call1/[ACDW].log
tar czf $OUT/results.tgz -C $OUT call1 && rm -rf $OUT/call1
for v in A C D W; do tar czf $OUT/build_$v.tgz -C /tmp/m $v/cold_start $v/sft_args.json; done
ls -la $OUT
