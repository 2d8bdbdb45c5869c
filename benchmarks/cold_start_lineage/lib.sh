# Shared by the build scripts of this folder (source it from the repository root on a CUDA machine).

# setup_env: the environment every build runs in (the repository on PYTHONPATH, unbuffered logs).
setup_env() {
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
}

# start_build: what a build script sets first: T0 (its start, for deadlines), the environment, OUT (where the results
# and the packed builds go, default runs/cold_start_lineage), R=$OUT/r (the results folder) and START (the model to
# build from, default the shipped strong cold start).
start_build() {
  T0=$(date +%s)
  setup_env
  OUT=${OUT:-runs/cold_start_lineage}
  R=$OUT/r; mkdir -p "$R"
  START=${START:-agents/lmm/checkpoints/tiny-strong/cold_start}
}

# mends ROOT ARGS: trainers/sft.py (or $SFT, a command that takes its flags) with ARGS plus each variant's own args,
# one per variant of $VARIANTS ("name:extra sft args|...", on one line), side by side, into ROOT/name (logs
# $R/mend_name.log); sets NAMES to the variants.
mends() {
  local root=$1 args=$2 spec specs
  IFS='|' read -r -a specs <<< "$VARIANTS"
  NAMES=$(for spec in "${specs[@]}"; do echo "${spec%%:*}"; done)
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086  # args and a variant's args are lists of flags
    ${SFT:-python3 trainers/sft.py} $args ${spec#*:} --out "$root/${spec%%:*}" > "$R/mend_${spec%%:*}.log" 2>&1 &
  done
  wait
}

# v11_tail IN NATIVE OUT NAME...: v11's last two steps on IN/NAME/cold_start for each NAME side by side: the native
# step (cold_start_length.py, L = ${NATIVE_L:-300} cold-start steps, ${NATIVE_SHARE:-0.65} native rollouts, into NATIVE/NAME), then 150
# caption-only steps at lr 5e-5 into OUT/NAME. Logs in $R; needs $THINK (the build's think flags).
v11_tail() {
  local in=$1 native=$2 out=$3 v; shift 3
  local L=${NATIVE_L:-300}
  for v in "$@"; do
    timeout "${NATIVE_S:-170}" python3 benchmarks/cold_start_length.py --base-strong "$in/$v/cold_start" --native-by trace \
      --native-think spread --episodes 48 --device cuda --workers 7 --rollout-batch 96 --build-dir "$native/$v" \
      --sft-args "$THINK" --native-shares "${NATIVE_SHARE:-0.65}" --lengths "$L" --out "$R/native_$v" > "$R/native_$v.log" 2>&1 &
  done
  wait
  local C="--preset cpu --device cuda --no-amp --stage1-frame 2000 --stage1-caption 4000 --stage1-direct 0
     --stage1-tool 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 --stage2-steps 0
     --stage1-steps 150 --stage1-lr 5e-5 --batch-size 32 --warmup 10 --workers 7 --eval-every 0 --caption-max-frames 16
     --caption-aug-p 0.5"
  for v in "$@"; do
    # shellcheck disable=SC2086  # C is a list of flags
    python3 trainers/sft.py $C --tool-prior strong --init-from "$(ls -d "$native/$v"/strong_L"$L"*)/cold_start" \
      --out "$out/$v" > "$R/final_$v.log" 2>&1 &
  done
  wait
}

# quick_perceive ROOT SEEDS NAME...: benchmarks/perception.py on ROOT/NAME/cold_start for each NAME and each seed of
# SEEDS ("0" or "0 1"), all side by side, each stopped after ${PERC_S:-150} s: direct answers (n = 40 a family), tool
# gain (n = 96 per arm), ${PERC_CROPS:-60} crops; into $R/perc_NAME_sSEED.{json,md,log}, then the headline rows.
quick_perceive() {
  local root=$1 seeds=$2 v s; shift 2
  for v in "$@"; do for s in $seeds; do
    timeout "${PERC_S:-150}" python3 benchmarks/perception.py --checkpoint "$root/$v/cold_start" --frames 0 \
      --crops "${PERC_CROPS:-60}" --env-default-crops 0 --visible 40 --tool-episodes 96 --device cuda --seed "$s" \
      --json "$R/perc_${v}_s$s.json" > "$R/perc_${v}_s$s.log" 2>&1 &
  done; done
  wait
  for v in "$@"; do for s in $seeds; do echo "== $v seed $s"
    grep -E "object F1 \(|direct answers|needle|global|tool gain|with tools \(|forbidden|show the answer|when they do \|" \
      "$R/perc_${v}_s$s.md"
  done; done
}

# fit_variants DATA END_S: trainers/sft.py with DATA (flags whose corpus is already rendered) plus each variant's own
# flags, one per variant of $VARIANTS ("name:flags|..."), side by side into /tmp/f/NAME, each schedule fitted to end
# END_S seconds after $T0 (--stage2-fit); logs $R/train_NAME.log; sets NAMES; each one's steps and first and last
# loss into $OUT/lookup.txt.
fit_variants() {
  local data=$1 end_s=$2 spec specs name
  IFS='|' read -r -a specs <<< "$VARIANTS"
  NAMES=""
  for spec in "${specs[@]}"; do
    name=${spec%%:*}; NAMES="$NAMES $name"
    # shellcheck disable=SC2086  # flag lists
    python3 trainers/sft.py $data ${spec#*:} --stage2-steps 100000 --stage2-fit --workers 2 \
      --deadline-unix $((T0 + end_s)) --out "/tmp/f/$name" > "$R/train_$name.log" 2>&1 &
  done
  wait
  echo "training done at $(( $(date +%s) - T0 )) s"
  for name in $NAMES; do
    echo "== $name"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('steps', d['stage2_steps_done'],
      'loss', d['stage2_loss'][:1], d['stage2_loss'][-1:])" "/tmp/f/$name/sft_args.json"
  done 2>&1 | tee "$OUT/lookup.txt"
}

# pack_builds ROOT NAME...: $R (the results) into $OUT/results.tgz, and each ROOT/NAME build (cold start and
# sft_args.json) into its own $OUT/build_NAME.tgz.
pack_builds() {
  local root=$1 v; shift
  for v in "$@"; do cp "$root/$v/sft_args.json" "$R/${v}_sft_args.json"; done
  tar czf "$OUT/results.tgz" -C "$(dirname "$R")" "$(basename "$R")" && rm -rf "$R"
  for v in "$@"; do tar czf "$OUT/build_$v.tgz" -C "$root" "$v/cold_start" "$v/sft_args.json"; done
}

# second_turn_checks ROOT NAME...: for each ROOT/NAME/cold_start, side by side on cuda, what its second tool turn
# copies: after its own first turn with truthful captions (scene_view/sweep/windows_check.py on the 48 K = 4 needle
# episodes, then second_turn_check.py) and after the scripted sweep's first turn on 48 validation drills
# (drill_check.py); into $R/{windows,drills}_NAME.*, then each one's lines.
second_turn_checks() {
  local root=$1 sw=benchmarks/cold_start_lineage n; shift
  for n in "$@"; do
    [ -d "$root/$n/cold_start" ] || continue
    (timeout 90 python3 $sw/windows_check.py "$root/$n/cold_start" 24 "$R/windows_$n.json" cuda > "$R/windows_$n.txt" 2>&1
     python3 $sw/second_turn_check.py "$root/$n/cold_start" "$R/windows_$n.json" >> "$R/windows_$n.txt" 2>&1) &
    timeout 90 python3 $sw/drill_check.py "$root/$n/cold_start" 48 cuda > "$R/drills_$n.txt" 2>&1 &
  done
  wait
  for n in "$@"; do
    echo "== $n"; grep -v Warn "$R/windows_$n.txt"; grep -v Warn "$R/drills_$n.txt" | tail -1
  done
}
