#!/usr/bin/env bash
# Can the second turn's lookup be learned at all? (thirteenth session, second call, one GPU, under 10 minutes.)
# gpu_sighting.sh mixed sighting drills into the native step, but rendering them took the training time (qa: 304
# steps). Here the drills are the whole dose: their corpus is built once (N drills, 15 workers), then g2ks trains
# on them alone in two runs side by side (pA: batch 64 at lr 3e-4; pB: batch 256 at lr 1e-3), each schedule ending
# TRAIN_S seconds into the call (--stage2-fit); the drills come from fresh videos (the first call drew them from
# stage 2's few hundred, and the times were memorised per video: 3 of 48 held-out drills right). A diagnostic, not a build: the drills train nothing but the second
# tool turn. Then the same measures as gpu_sighting.sh: the second turn against the scripted sweep's with truthful
# captions (windows_check.py, second_turn_check.py), the same turn on held-out scripted first turns with and without
# frames (drill_check.py), and, if END_S leaves 90 s, quick perception on seed 0 to see what the rest lost.
#   run(command="bash benchmarks/results/scene_view/sweep/gpu_sighting_dose.sh", carry=[".whl"])
# CORPUS=path.tgz (carried) skips the rendering: the third call carried the 12,000 fresh drills rendered on the CPU
# (`tar czf .carry/fresh_corpus.tgz -C ~/.cache/paravt-gym/corpus KEY`, 5.4 MB; N must match the corpus).
# START: as in gpu_sighting.sh (the shipped strong cold start; its header says how to restore the recorded g2ks).
set -u
. benchmarks/results/presence/device_lib.sh
start_device_call
DATA="--preset gpu --tool-prior strong --init-from $START --stage1-frame 0 --stage1-caption 0 --stage1-direct 0
  --stage1-tool 0 --stage1-steps 0 --stage2-native-traces 0.65 --native-think spread --warmup 100
  --grounded-think true --option-think true --presence-think true --direct-think scene_chain_decide
  --search-agent sweep --oracle-fraction 0 --tool-families needle,needle_attribute --tool-on-visible 0.7
  --zoom-think sighting --seed 10 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0
  --stage2-sighting ${N:-40000} --device cuda --eval-every 0 --eval-frames 0 --eval-crops 0 --progress false"
if [ -n "${CORPUS:-}" ]; then  # a corpus pre-rendered elsewhere (tar.gz of its key folder): no rendering here
  mkdir -p /tmp/corp && tar xzf "$CORPUS" -C /tmp/corp && DATA="$DATA --corpus-dir $(ls -d /tmp/corp/*)"
else
  # shellcheck disable=SC2086  # DATA is a list of flags
  python3 trainers/sft.py $DATA --stage2-steps 0 --workers 15 --out /tmp/corpus_only > "$R/corpus.log" 2>&1
fi
echo "corpus done at $(( $(date +%s) - T0 )) s"
VARIANTS=${VARIANTS:-"pA:--batch-size 64 --batch-tokens 65536 --stage2-lr 3e-4|pB:--batch-size 256 --batch-tokens 262144 --stage2-lr 1e-3"}
fit_variants "$DATA" "${TRAIN_S:-390}"
# shellcheck disable=SC2086  # NAMES is a list of names
second_turn_checks /tmp/f $NAMES | tee -a "$OUT/lookup.txt"
echo "lookup done at $(( $(date +%s) - T0 )) s"
# shellcheck disable=SC2086  # NAMES is a list of names
PERC_S=$(( ${END_S:-575} - ($(date +%s) - T0) ))
[ "$PERC_S" -ge 90 ] && quick_perceive /tmp/f 0 $NAMES | tee -a "$OUT/lookup.txt"
# shellcheck disable=SC2086  # NAMES is a list of names
pack_builds /tmp/f $NAMES
echo "all done at $(( $(date +%s) - T0 )) s"
