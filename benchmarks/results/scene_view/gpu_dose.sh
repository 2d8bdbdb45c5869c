#!/usr/bin/env bash
# Does the scene view keep rising past 2,500 steps, and at which lr does the reading survive? (2026-12-04, sixth
# session, one H200 call.) From s3r (the CPU reading mend, carried) with gpu_next.sh's corpus (the scene view, v13's
# reading drills and probes), one corpus rendered once, two learning rates side by side to one deadline:
#   d1   lr 1e-4 (s3r's own mend rate);
#   d3   lr 3e-4 (gpu_next.sh's rate, which lost the reading from v13).
# Then perception on both draws. Returns results.tgz and one build archive per variant.
#   run(command="bash benchmarks/results/scene_view/gpu_dose.sh", carry=[".whl", ".carry/sv/s3r"])
# DOSE_VARIANTS ("name:init:lr[:own,flags] ...", the first renders the corpus; own flags only for that variant, commas for spaces, e.g.
# "g8:agents/lmm/checkpoints/tiny-weak/cold_start:3e-4:--grow-layers,4"), TOOL_ROWS (native tool traces), DIRECT_THINK and
# EXTRA_ARGS (more sft flags for every variant, e.g. another data --seed) change the runs; the second call, without native traces (s3r's CPU mend had none and read 0.84):
#   run(command="TRAIN_S=380 PERC_S=130 TOOL_ROWS=0 DOSE_VARIANTS='n0:.carry/sv/s3r/cold_start:3e-4 r0:.carry/sv/d3/cold_start:1e-4'
#       bash benchmarks/results/scene_view/gpu_dose.sh", carry=[".whl", ".carry/sv/s3r", ".carry/sv/d3"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/dose; mkdir -p $R
DEADLINE=$(( $(date +%s) + ${TRAIN_S:-440} ))
ARGS="--preset gpu --amp false --tool-prior strong
  --grounded-think true --option-think true --presence-think true --direct-think ${DIRECT_THINK:-scene}
  --stage1-frame 3000 --stage1-caption 8000 --stage1-direct 6000 --stage1-tool ${TOOL_ROWS:-8000} --stage1-reading 8000
  --stage1-presence 30000 --reading-oracle-fraction 0.2 --drill-decisions false --stage1-direct-needle 20000
  --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 6000
  --warmup 50 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.7 --workers 15 --search-agent scene
  --deadline-unix $DEADLINE --eval-every 0 --batch-size 256 --batch-tokens 49152 --oracle-fraction 0 ${EXTRA_ARGS:-}"
read -r -a VARS <<< "${DOSE_VARIANTS:-d1:.carry/sv/s3r/cold_start:1e-4 d3:.carry/sv/s3r/cold_start:3e-4}"
NAMES=""
for spec in "${VARS[@]}"; do
  IFS=: read -r name init lr own <<< "$spec"; NAMES="$NAMES $name"
  # shellcheck disable=SC2086  # ARGS and the variant's own flags (commas for spaces) are lists of flags
  python3 trainers/sft.py $ARGS --init-from "$init" --stage1-lr "$lr" ${own//,/ } --out /tmp/m/$name > $R/mend_$name.log 2>&1 &
  # the next variant reads the corpus this one renders (the same data flags)
  until grep -aq "corpus ready" $R/mend_$name.log || ! kill -0 $! 2>/dev/null; do sleep 2; done
done
wait
for v in $NAMES; do grep -a "corpus ready\|stage1 step\|done in" $R/mend_$v.log | tail -3; done
quick_perceive /tmp/m "0 1" $NAMES
pack_builds /tmp/m $NAMES
