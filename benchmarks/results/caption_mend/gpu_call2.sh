#!/usr/bin/env bash
# Device call 2 (one H200): can v10's recipe give a wider format break than its 0.302? From caption mend C
# (.carry/C, GPU call 1): the native step at (share, L) = (0.65, 300), (0.75, 200), (0.75, 300), each then
# given v10's 150-step caption mend; perception and the prior at 192 episodes of each mended build.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
R=$OUT/call2; mkdir -p $R
native() {  # share, lengths
  python3 benchmarks/cold_start_length.py --base-strong .carry/C/cold_start --native-by trace --native-think spread \
    --episodes 96 --device cuda --workers 7 --rollout-batch 96 --build-dir /tmp/n \
    --sft-args "--grounded-think true --option-think true --direct-think needle" \
    --native-shares $1 --lengths $2 --out $R/native_$1 > $R/native_$1.log 2>&1
}
native 0.65 300 &
native 0.75 200,300 &
wait
M="--preset cpu --device cuda --amp false --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0 --stage1-tool 0
   --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 150
   --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 4 --eval-every 0 --caption-max-frames 16 --caption-aug-p 0.5"
for d in /tmp/n/strong_L*native*; do
  v=$(basename $d | sed 's/strong_\(L[0-9]*\)_native\([0-9.]*\)_.*/\1_p\2/')
  python3 trainers/sft.py $M --tool-prior strong --init-from $d/cold_start --out /tmp/m/$v > $R/mend_$v.log 2>&1 &
done
wait
P="--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"
for v in $(ls /tmp/m); do
  python3 benchmarks/perception.py --checkpoint /tmp/m/$v $P --json $R/perc_$v.json > $R/perc_$v.log 2>&1 &
  python3 benchmarks/prior.py --only strong --strong /tmp/m/$v/cold_start --episodes 192 --device cuda \
    --settings greedy/K,t0.7/K --out $R/prior_$v > $R/prior_$v.log 2>&1 &
done
python3 benchmarks/prior.py --only strong --strong agents/lmm/checkpoints/tiny-strong/cold_start --episodes 192 \
  --device cuda --settings greedy/K,t0.7/K --out $R/prior_v10 > $R/prior_v10.log 2>&1 &
wait
grep -h "^| strong | [0-9]" $R/native_*.md
for f in $R/perc_*.md; do echo "== $f"; grep -E "single-frame object|crop object F1|direct answers|tool gain|reading" $f; done
for f in $R/prior_*.md; do echo "== $f"; grep -E "^\| strong \| 64 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|" $f; done
grep -h "done in" $R/*.log
tar czf $OUT/results.tgz -C $OUT call2 && rm -rf $R
for v in $(ls /tmp/m); do tar czf $OUT/build_$v.tgz -C /tmp/m $v/cold_start $v/sft_args.json; done
ls -la $OUT
