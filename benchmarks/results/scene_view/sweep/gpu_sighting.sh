#!/usr/bin/env bash
# Sighting drills in the native step (thirteenth session, one H200 call, under 10 minutes). g2ks's second tool turn
# copies the times of the question's scene in about a third of the episodes, whatever the dose of real traces
# (README, twelfth session). Here g2ks gets the native step again (v11_tail: the native step, then 150 caption
# steps), on one new corpus draw, with text-only drills of exactly that turn mixed in (trainers/sft.py
# --stage2-sighting, agents.lmm.corpus.sighting_probe), and a control without them. Every batch holds up to 64
# sequences (--batch-tokens 65536; the native step's own 16,384 fit about 14 of these 1,000-token traces; qb: 128),
# and the native step's schedule ends TRAIN_S seconds into the call (--stage2-fit with --deadline-unix), whatever
# step count that allows on the machine.
# Then, per build: its second turn (device_lib.sh second_turn_checks; the recorded call ran it before drill_check.py
# joined it) and quick perception on seed 0 (direct answers, tool gain).
#   run(command="bash benchmarks/results/scene_view/sweep/gpu_sighting.sh", carry=[".whl"])
# VARIANTS ("name:flags|..." or "name:flags:native share|..."), START (the build every variant continues) and TRAIN_S
# may be set. Returns results.tgz, lookup.txt and one build_NAME.tgz each.
# Fourteenth session (fresh stage-2 videos; strong v14 is ffa): call 1 (sweep/call5/) with
#   VARIANTS="fr:--stage2-fresh true|frs:--stage2-fresh true --stage2-sighting 12000", call 2 (sweep/call6/) with
#   START=benchmarks/results/scene_view/sweep/call5/fr/cold_start (fr's weights are not in git)
#   VARIANTS="ffa:--stage2-fresh true --seed 11|ffb:--stage2-fresh true --seed 12:0.8".
# START defaults to the shipped strong cold start (v14). The recorded calls started from g2ks, whose weights left the
# tree in the fourteenth session (a call carries at most 64 MiB); restore them with
#   git checkout ad0ce1f -- benchmarks/results/scene_view/sweep/call2/g2ks/cold_start
# and pass START=benchmarks/results/scene_view/sweep/call2/g2ks/cold_start.
set -u
. benchmarks/results/presence/device_lib.sh
start_device_call
S="--grounded-think true --option-think true --presence-think true --direct-think scene_chain_decide
   --search-agent sweep --oracle-fraction 0 --tool-families needle,needle_attribute --tool-on-visible 0.7
   --zoom-think sighting --seed 10 --stage2-tool 6000 --batch-tokens 65536 --warmup 100 --stage2-fit true
   --deadline-unix $((T0 + ${TRAIN_S:-360}))"
VARIANTS=${VARIANTS:-"qa:--stage2-sighting 24000|qb:--stage2-sighting 24000 --batch-size 128 --batch-tokens 131072|qc:"}
IFS='|' read -r -a specs <<< "$VARIANTS"
NAMES=""
for spec in "${specs[@]}"; do
  name=${spec%%:*}; NAMES="$NAMES $name"; rest=${spec#*:}; flags=${rest%%:*}; share=0.65
  [ "$rest" != "$flags" ] && share=${rest#*:}
  mkdir -p "/tmp/s/$name" && cp -r "$START" "/tmp/s/$name/cold_start" && cp "$(dirname "$START")/sft_args.json" "/tmp/s/$name/"
  # shellcheck disable=SC2086  # flags are lists of flags
  (THINK="$S $flags" NATIVE_SHARE=$share NATIVE_L=100000 NATIVE_S=400 v11_tail /tmp/s /tmp/n /tmp/f "$name") &
done
wait
echo "builds done at $(( $(date +%s) - T0 )) s"
# shellcheck disable=SC2086  # NAMES is a list of names
second_turn_checks /tmp/f $NAMES | tee "$OUT/lookup.txt"
echo "lookup done at $(( $(date +%s) - T0 )) s"
# shellcheck disable=SC2086  # NAMES is a list of names
PERC_S=$(( 575 - ($(date +%s) - T0) )) quick_perceive /tmp/f 0 $NAMES | tee -a "$OUT/lookup.txt"
# shellcheck disable=SC2086  # NAMES is a list of names
pack_builds /tmp/f $NAMES
echo "all done at $(( $(date +%s) - T0 )) s"
ls -la "$OUT"
