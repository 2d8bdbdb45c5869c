#!/usr/bin/env bash
# The lookup probe at a GPU's dose (twentieth session, results and reading in gpu/README.md): the runs of RUNS
# ("form init batch lr [kl]|...") side by side on one GPU for MINUTES each; one JSON history per run in $OUT, and the
# best run (formed first, then least drift from its start) as a build in $OUT/best.tar.gz (cold_start/, sft_args.json:
# unpack it under .carry/NAME and pass START=.carry/NAME/cold_start to ../../sweep/gpu_sighting.sh).
# Call 1 (gpu/call1, RUNS unset): both caption grammars from a fresh init and from the shipped strong cold start
# (those two crashed: transformers' from_pretrained fetched Hub kernels; the script now loads with the project's loader):
#   run(command="bash benchmarks/results/scene_view/lookup_form/gpu_lookup_form.sh", carry=[".whl"])
# Call 2 (gpu/call2): the today grammar from the shipped v15 at four doses (that call also returned its logs, which
# took the place of the weights; a later call fetched them from the still-warm machine):
#   run(command="MINUTES=4.5 RUNS='today shipped 64 1e-3|today shipped 32 1e-3|today shipped 64 3e-4|today shipped
#       128 1e-3' bash benchmarks/results/scene_view/lookup_form/gpu_lookup_form.sh", carry=[".whl"])
# Call 3 (gpu/call3): with a KL anchor to v15 on the probes' prefixes (call 2's formed lookup came with a model that
# wrote only digits), stopping at held-out entry accuracy STOP_ENTRY:
#   run(command="MINUTES=6.5 STOP_ENTRY=0.97 RUNS='today shipped 32 1e-3 1|today shipped 32 1e-3 0.3|today shipped
#       32 2e-3 1|today shipped 16 1e-3 1|today shipped 32 1e-3 0.1' bash
#       benchmarks/results/scene_view/lookup_form/gpu_lookup_form.sh", carry=[".whl"])
# Call 4 (gpu/call4): call 3's KL 0.3 run alone, longer:
#   run(command=". benchmarks/results/presence/device_lib.sh && install_carried_wheels && python
#       benchmarks/results/scene_view/lookup_form/lookup_form.py --form today --init shipped --batch-size 32 --lr 1e-3
#       --kl 0.3 --minutes 3.9 --eval-every 250 --stop-entry 0.97 --device cuda --out
#       $OUT/today_shipped_b32_lr1e-3_kl0.3_alone.json --save $OUT/formed", carry=[".whl"])
# Call 5 (gpu/call5, twenty-first session): drills drawn from real second turns (--form real), unanchored. The real
# drills are about 900 tokens, 2.4 times the probes, and v15 formed the probes' lookup only after 3,375 steps of batch
# 32, so two runs got the whole call (about 90 s of it draws the 20,000 drills on 16 cores):
#   run(command="MINUTES=7 WORKERS=8 STOP_ENTRY=0.95 RUNS='real shipped 32 1e-3|real shipped 64 1e-3' bash
#       benchmarks/results/scene_view/lookup_form/gpu_lookup_form.sh", carry=[".whl"], timeout_s=600)
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
M=${MINUTES:-7}
P=benchmarks/results/scene_view/lookup_form/lookup_form.py
RUNS=${RUNS:-"today shipped 256 1e-3|adjacent shipped 256 1e-3|today fresh 256 1e-3|adjacent fresh 256 1e-3|today shipped 256 3e-4|today fresh 64 1e-3"}
IFS='|' read -r -a specs <<< "$RUNS"
for spec in "${specs[@]}"; do
  read -r form init bs lr kl <<< "$spec"
  kl=${kl:-0}
  name=${form}_${init}_b${bs}_lr${lr}$([ "$kl" != 0 ] && echo "_kl$kl")
  python $P --form "$form" --init "$init" --batch-size "$bs" --lr "$lr" --kl "$kl" --minutes "$M" --eval-every 125 \
    --stop-entry "${STOP_ENTRY:-1.1}" --workers "${WORKERS:-1}" \
    --device cuda --out "$OUT/$name.json" --save "/tmp/lf/$name" > "/tmp/lf_$name.log" 2>&1 &
done
wait
for f in /tmp/lf_*.log; do  # a call returns at most 8 files: the logs stay here, a failed run's tail is printed
  n=${f#/tmp/lf_}; [ -f "$OUT/${n%.log}.json" ] || { echo "== $n failed:"; tail -5 "$f"; }
done
python - "$OUT" <<'PY'
import glob, json, os, shutil, sys
out = sys.argv[1]
runs = {}
for f in sorted(glob.glob(f"{out}/*.json")):
    h = json.load(open(f))["history"]
    print(os.path.basename(f), h[-1])
    # the lookup formed (entry >= 0.9) first, then the least drift from the start model
    runs[os.path.basename(f)[:-5]] = (h[-1]["entry"] >= 0.9, -h[-1].get("prefix_kl", 0.0), h[-1]["entry"])
if runs:
    best = max(runs, key=runs.get)
    print("best:", best)
    # one file: a call returns at most 8 (calls 1-4 saved bare weights instead, as best/model.safetensors)
    shutil.make_archive(f"{out}/best", "gztar", f"/tmp/lf/{best}")
PY
