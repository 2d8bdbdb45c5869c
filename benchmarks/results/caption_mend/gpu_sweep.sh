#!/usr/bin/env bash
# Device call 3 (one H200): the ablation rows of benchmarks/results/native_traces/sweep_v9 again, from the shipped
# strong v11 and weak v7; only the report comes back.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
python3 trainers/sweep.py --preset paper --rows cold_start,grpo,anchoring,full,gating,weak_grpo --seeds 1,2 \
  --device cuda --jobs 12 --time-limit-s 330 --out /tmp/sweep_v11 --no-progress > /tmp/sweep.log 2>&1
tail -5 /tmp/sweep.log
cp /tmp/sweep.log /tmp/sweep_v11/sweep.log
cat /tmp/sweep_v11/results.md | head -12
tar czf $OUT/sweep_v11.tgz -C /tmp --exclude=sweep_v11/runs sweep_v11
ls -la $OUT
