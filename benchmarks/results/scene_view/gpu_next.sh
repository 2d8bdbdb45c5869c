#!/usr/bin/env bash
# Ready for a session with device time (one H200, one call of about 9 minutes; not yet run): the scene view from the
# shipped v13 at a GPU's dose in one mend, with v13's presence reading drills and probes in the mix (the CPU mend in
# README.md brought the reading back that way), two ways side by side:
#   sv    tool traces by the scene agent (v13's teacher);
#   svz   tool traces by the zoom agent (a first turn finds the scene, a second tiles it), the windows' lever
#         (crops show the answer in 0.13-0.16 of episodes for v13 and s3; the zoom agent's in 0.44-0.52).
# Then perception on both draws (direct answers n = 40 a family, tool gain n = 96 per arm). Returns results.tgz and
# one build archive per variant.
#   run(command="bash benchmarks/results/scene_view/gpu_next.sh", carry=[".whl"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/next; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think scene"
BASE="--preset gpu --amp false --tool-prior strong --init-from agents/lmm/checkpoints/tiny-strong/cold_start
  --stage1-frame 3000 --stage1-caption 8000 --stage1-direct 6000 --stage1-tool 8000 --stage1-reading 8000
  --stage1-presence 30000 --reading-oracle-fraction 0.2 --drill-decisions false --stage1-direct-needle 20000
  --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0 --stage1-steps 3000
  --stage1-lr 3e-4 --warmup 50 --perception-warmup 0 --caption-max-frames 16 --caption-aug-p 0.7 --workers 15
  --time-budget-s ${BUDGET:-380} --eval-every 0 --batch-size 256 --batch-tokens 49152 --oracle-fraction 0 $THINK"
VARIANTS="sv:--search-agent scene|svz:--search-agent zoom"
mends /tmp/m "$(echo $BASE)"
for v in $NAMES; do grep -a "corpus ready\|done in" $R/mend_$v.log | tail -2; done
quick_perceive /tmp/m "0 1" $NAMES
pack_builds /tmp/m $NAMES
