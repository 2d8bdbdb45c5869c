#!/usr/bin/env bash
# One device call (one H200). From the shipped strong v11: a drill mend whose direct-answer drills are played with
# no tool advertised (decisions trained there; the reading drills in the tool prompt leave the call-or-answer
# tokens untrained), 600 steps of batch 256, with the plain grounded line (needle) and the timed one
# (needle_time); then v11's own tail on each: the native step (L = 300, 65 % native rollouts) and the 150-step
# caption mend. Perception and the tool prior (192 episodes) after the drill mend and at the end.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
R=$OUT/call1; mkdir -p $R
S=agents/lmm/checkpoints/tiny-strong/cold_start
MEND="--preset gpu --amp false --stage1-frame 4000 --stage1-caption 12000 --stage1-direct 0 --stage1-tool 0
      --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 600
      --warmup 30 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.5 --workers 7 --time-budget-s 170
      --eval-every 0 --batch-size 256 --batch-tokens 49152 --stage1-lr 1e-4 --tool-prior strong
      --stage1-reading 8000 --stage1-direct-needle 16000 --grounded-think true --option-think true
      --oracle-fraction 0 --reading-oracle-fraction 0.2 --drill-decisions false --drill-no-tool-share 1.0"
P="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"
measure() {
  python3 benchmarks/perception.py --checkpoint $1 $P --json $R/perc_$2.json > $R/perc_$2.log 2>&1 &
  python3 benchmarks/prior.py --only strong --strong $1 --episodes 192 --device cuda \
    --settings greedy/K,t0.7/K --agreement-crops 0 --out $R/prior_$2 > $R/prior_$2.log 2>&1 &
}
summary() {
  for f in $R/perc_*.md; do echo "== $f"; grep -E "single-frame object|crop object F1|direct answers|same, the env|\.\.\. needle|tool gain|calls/ep|reading" $f; done
  for f in $R/prior_*.md; do echo "== $f"; grep -E "^\| strong \| 64 \| [0-9.]+ \|" $f; done
  grep -h "done in" $R/*.log
}
for t in needle needle_time; do
  python3 trainers/sft.py $MEND --direct-think $t --init-from $S --out /tmp/m/$t > $R/mend_$t.log 2>&1 &
done
wait
for t in needle needle_time; do
  measure /tmp/m/$t/cold_start mend_$t
  python3 benchmarks/cold_start_length.py --base-strong /tmp/m/$t/cold_start --native-by trace --native-think spread \
    --episodes 96 --device cuda --workers 7 --rollout-batch 96 --build-dir /tmp/n/$t \
    --sft-args "--grounded-think true --option-think true --direct-think $t" \
    --native-shares 0.65 --lengths 300 --out $R/native_$t > $R/native_$t.log 2>&1 &
done
wait
summary; tar czf $OUT/results1.tgz -C $OUT call1
C="--preset cpu --device cuda --amp false --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 --stage1-tool 0
   --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 150
   --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 7 --eval-every 0 --caption-max-frames 16 --caption-aug-p 0.5"
for t in needle needle_time; do
  python3 trainers/sft.py $C --tool-prior strong --init-from $(ls -d /tmp/n/$t/strong_L300*)/cold_start \
    --out /tmp/f/$t > $R/final_$t.log 2>&1 &
done
wait
for t in needle needle_time; do measure /tmp/f/$t/cold_start final_$t; done
wait
summary
tar czf $OUT/results2.tgz -C $OUT call1 && rm -rf $R
for t in needle needle_time; do
  tar czf $OUT/mend_$t.tgz -C /tmp/m $t/cold_start $t/sft_args.json
  tar czf $OUT/final_$t.tgz -C /tmp/f $t/cold_start $t/sft_args.json
done
ls -la $OUT
