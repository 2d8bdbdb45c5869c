#!/usr/bin/env bash
# The native step, with text-only sighting drills of the second tool turn mixed in (trainers/sft.py
# --stage2-sighting, agents.lmm.corpus.sighting_probe) when a variant asks for them: lib.sh's v11_tail (the native
# step, then 150 caption steps) from $START, on one new corpus draw. Every batch holds up to 64 sequences
# (--batch-tokens 65536), and the native step's schedule ends TRAIN_S seconds after the start (--stage2-fit with
# --deadline-unix), whatever step count that allows on the machine.
# Then, per build: its second turn (lib.sh's second_turn_checks) and quick perception on seed 0 (direct answers,
# tool gain).
#   bash benchmarks/cold_start_lineage/native_step.sh
# VARIANTS ("name:flags|..." or "name:flags:native share|..."), START (the build every variant continues) and TRAIN_S
# may be set. Writes results.tgz, lookup.txt and one build_NAME.tgz each into $OUT. README.md beside this file has
# the VARIANTS that built the shipped cold starts.
set -u
. benchmarks/cold_start_lineage/lib.sh
start_build
S="--grounded-think --option-think --presence-think --direct-think scene_chain_decide
   --search-agent sweep --oracle-fraction 0 --tool-families needle,needle_attribute --tool-on-visible 0.7
   --zoom-think sighting --seed 10 --stage2-tool 6000 --batch-tokens 65536 --warmup 100 --stage2-fit
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
