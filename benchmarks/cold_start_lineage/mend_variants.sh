#!/usr/bin/env bash
# mend.sh's variants ($VARIANTS, "NAME:extra flags|...") built side by side on one GPU, then each one's tool prior
# (${PRIOR:-strong}) and perception on three held-out draws (measure.sh's measure_variants). Results go to
# $OUT/r.tgz, the checkpoints named in $KEEP to $OUT/mend_NAME.tgz. README.md beside this file has the VARIANTS that
# built the shipped cold starts.
set -u
. benchmarks/cold_start_lineage/lib.sh && start_build
. benchmarks/cold_start_lineage/measure.sh
export PYTHON=python3
BIG="--stage1-lr 1e-4 --stage1-steps 300 --batch-size 64 --stage1-direct-needle 4000 --stage1-caption 2000 --stage1-frame 1000"
VARIANTS=${VARIANTS:-"c:--stage1-steps 300 --stage1-direct-needle 4000|f:$BIG|g:$BIG --stage1-steps 600 --stage1-direct-needle 8000 --stage1-caption 4000 --stage1-frame 2000|h:$BIG --stage1-lr 2e-4|i:$BIG --drill-weight 2"}
SFT=benchmarks/cold_start_lineage/mend.sh mends /tmp/m "--device cuda --no-amp --workers ${WORKERS:-2} --no-progress"
echo "builds done at $(( $(date +%s) - T0 )) s"
measure_variants "${PRIOR:-strong}"
finish
