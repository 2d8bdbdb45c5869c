# Shared by gpu_chain.sh and gpu_capmend.sh (source it from the repository root, on the device machine).

# The carried wheels (.whl: gymnasium, pettingzoo) on top of the machine's torch and transformers.
install_carried_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
}

# perceive ROOT NAME...: benchmarks/perception.py on ROOT/NAME/cold_start for each NAME side by side, into
# $R/perc_NAME.{json,md,log}, then the headline rows of each. $PERCEPTION_ARGS overrides the sample sizes and device.
perceive() {
  local root=$1 v; shift
  local args=${PERCEPTION_ARGS:-"--frames 200 --crops 200 --env-default-crops 200 --visible 40 --tool-episodes 48 --device cuda"}
  for v in "$@"; do
    # shellcheck disable=SC2086  # args is a list of flags
    python3 benchmarks/perception.py --checkpoint "$root/$v/cold_start" $args --json "$R/perc_$v.json" > "$R/perc_$v.log" 2>&1 &
  done
  wait
  for v in "$@"; do echo "== $v"; grep -E "object F1|direct answers|tool gain|calls/ep|reading" "$R/perc_$v.md"; done
}
