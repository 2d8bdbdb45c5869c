#!/usr/bin/env bash
# One device call (one H200): does the scene-checking presence chain (section 10) learn its lookup at the dose that
# formed the plain chain (section 1: about 1,000 steps of batch 512)? Four text-probe runs side by side, two from the
# shipped strong cold start (v13: scene1 and scene, each through the curriculum) and two from f16z (section 9's
# 16-frame zoom build, carried in .carry/f16z: scene with and without the curriculum), then each scored by greedy
# decoding on 400 held-out probes of two scenes a response, split by rivals (scene_probe_eval.py). The f16z models
# come back (sp/f16z_*.tar) for a mend; logs in sp1/ and sp/, scores in eval_*.txt.
#   run(command="MIN=6 bash benchmarks/results/presence/gpu_scene_probe.sh", carry=[".whl", ".carry/f16z"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=benchmarks/results/reading_experiments
F=.carry/f16z/cold_start
A="--text-forward eager --batch-size 512 --eval-every 250 --lr 1e-3 --workers 3"
C="--curriculum 2:1500,4:1500,12:100000 --advance-at 0.9 --pool 80000"
MIN=${MIN:-7}
FORM=scene1 bash $R/gpu_lookup.sh "$OUT/sp1" "$MIN" "scene1_curr||$A $C" &
FORM=scene bash $R/gpu_lookup.sh "$OUT/sp" "$MIN" "scene_curr||$A $C" "f16z_scene_curr|$F|$A $C" \
  "f16z_scene|$F|$A --pool 200000" &
wait
for t in "$OUT"/sp1/*.tar "$OUT"/sp/*.tar; do
  name=$(basename "$t" .tar)
  mkdir -p /tmp/m && tar -C /tmp/m -xf "$t"
  python $R/scene_probe_eval.py "/tmp/m/$name" 400 12 2 cuda 2>&1 | grep -v Loading | tee "$OUT/eval_$name.txt" &
done
wait
rm -f "$OUT"/sp1/*.tar "$OUT"/sp/scene*.tar
