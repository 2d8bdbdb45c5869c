# Shared by mend_variants.sh (source it from the repository root after lib.sh's start_build; lib.sh's mends builds
# the variants and sets $NAMES).

# measure_variants PRIOR: for each of $NAMES, side by side, each stopped after ${EVAL_S:-400} s: the tool prior of
# PRIOR (strong|weak; K = 64, 96 episodes, greedy and T = 0.7), perception on draw 0 with $SEED0_ARGS (default: the
# benchmark's defaults), and direct answers alone (n = 80 a family) on the draws of ${DRAWS:-1 2}.
measure_variants() {
  local prior=$1 n s
  for n in $NAMES; do
    [ -d "/tmp/m/$n/cold_start" ] || continue
    # shellcheck disable=SC2086  # SEED0_ARGS is a list of flags
    timeout "${EVAL_S:-400}" python3 benchmarks/prior.py --only "$prior" --"$prior" "/tmp/m/$n/cold_start" --episodes 96 \
      --device cuda --settings greedy/K,t0.7/K --agreement-crops 0 --out "$R/prior_$n" > "$R/prior_$n.log" 2>&1 &
    timeout "${EVAL_S:-400}" python3 benchmarks/perception.py --checkpoint "/tmp/m/$n/cold_start" --device cuda \
      ${SEED0_ARGS:-} --json "$R/p_${n}_s0.json" > "$R/p_${n}_s0.log" 2>&1 &
    for s in ${DRAWS-1 2}; do
      timeout "${EVAL_S:-400}" python3 benchmarks/perception.py --checkpoint "/tmp/m/$n/cold_start" --device cuda \
        --seed "$s" --frames 0 --crops 0 --env-default-crops 0 --tool-episodes 0 \
        --json "$R/p_${n}_s$s.json" > "$R/p_${n}_s$s.log" 2>&1 &
    done
  done
  wait
}

# finish: the summary lines, then $OUT/r.tgz (every result) and $OUT/mend_NAME.tgz for each NAME of $KEEP.
finish() {
  python3 benchmarks/cold_start_lineage/summarise.py "$R"
  echo "all done at $(( $(date +%s) - T0 )) s"
  (cd "$OUT" && tar czf r.tgz r && rm -rf r)
  local n
  for n in ${KEEP:-}; do tar czf "$OUT/mend_$n.tgz" -C /tmp/m "$n/cold_start" "$n/sft_args.json"; done
}
