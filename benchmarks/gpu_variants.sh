#!/usr/bin/env bash
# Several strong-prior SFT variants side by side on one GPU machine, then perception of each
# (benchmarks/perception.py: captions, direct answers, tool gain and reading at K = 4) and, with
# PRIOR_SECONDS > 0, its tool prior (benchmarks/prior.py --only strong).
#
#   VARIANTS="name:gpu:flags;name:gpu:flags;..." bash benchmarks/gpu_variants.sh
#
# Every variant runs `trainers/sft.py --preset gpu --tool-prior strong <COMMON> <its flags>`; variants
# with the same data flags share one pre-rendered corpus (sft.py locks and reuses it). Builds go to
# runs/gpu/var/<name>; $OUT receives results.tgz (perception JSON/markdown, logs, sft_args) and
# build_<name>.tgz (each variant's cold_start and base, its stage-1 weights; 8 files at most come back). The defaults fit one 10-minute device call.
# ENV_CROPS > 0 adds that many crops as a default env gives them (64 px, 16 frames) to the perception run.
set -u
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true  # corpus workers pass tensors through shared memory
OUT=${OUT:-runs/gpu/out}; ROOT=runs/gpu/var; PY=${PY:-python3}
mkdir -p "$ROOT" "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
IFS=';' read -ra specs <<< "${VARIANTS:?set VARIANTS=name:gpu:flags;...}"
for spec in "${specs[@]}"; do
  name=${spec%%:*}; rest=${spec#*:}; gpu=${rest%%:*}; flags=${rest#*:}
  mkdir -p "$ROOT/$name"
  ( CUDA_VISIBLE_DEVICES=$gpu timeout ${SFT_SECONDS:-380} $PY trainers/sft.py --preset gpu --tool-prior strong \
      --time-budget-s $(( ${SFT_SECONDS:-380} - 20 )) --workers ${WORKERS:-15} ${COMMON:-} $flags \
      --out "$ROOT/$name" --runs-dir "$ROOT/$name/tb" --progress false > "$ROOT/$name/sft.log" 2>&1
    echo "$name: sft rc $? at $SECONDS s"
    CUDA_VISIBLE_DEVICES=$gpu timeout ${PERCEPTION_SECONDS:-120} $PY benchmarks/perception.py --device cuda \
      --checkpoint "$ROOT/$name/cold_start" --json "$ROOT/$name/perception.json" --batch-size 256 \
      --frames 200 --crops 200 --env-default-crops ${ENV_CROPS:-0} --visible 40 --tool-episodes 48 > "$ROOT/$name/perception.log" 2>&1
    echo "$name: perception rc $? at $SECONDS s"
    if [ "${PRIOR_SECONDS:-0}" -gt 0 ]; then  # the tool prior of the variant (strong only)
      CUDA_VISIBLE_DEVICES=$gpu timeout $PRIOR_SECONDS $PY benchmarks/prior.py --device cuda --only strong \
        --strong "$ROOT/$name/cold_start" --episodes 48 --out "$ROOT/$name/prior" > "$ROOT/$name/prior.log" 2>&1
      echo "$name: prior rc $? at $SECONDS s"
    fi ) &
done
wait
cd "$ROOT" && tar czf "$OUT/results.tgz" */perception.* */prior.* */*.log */sft_args.json */tb 2>/dev/null
for spec in "${specs[@]}"; do name=${spec%%:*}; tar czf "$OUT/build_$name.tgz" "$name/cold_start" "$name/base" "$name/sft_args.json" 2>/dev/null; done
ls -la "$OUT"; for f in */perception.md; do echo "== $f"; cat "$f"; done
