#!/usr/bin/env bash
# One device call (one H200), ready for a session with device time: is the scene lookup (sections 10-12) held back
# by the tiny model's capacity? The scene form through the curriculum, side by side at one dose: from v13 (call 1 of
# section 12 reached 0.618 with rivals), a random-init model of the tiny shape (4 layers x 128), and a random-init
# wider one (8 layers x 256, 8 heads; about 6x the text parameters). Then greedy scores on the 400 held-out probes,
# split by rivals (scene_probe_eval.py). Everything comes back in results.tgz.
#   run(command="MIN=8 bash benchmarks/results/presence/gpu_capacity_probe.sh", carry=[".whl"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=benchmarks/results/reading_experiments
A="--text-forward eager --batch-size 512 --eval-every 250 --lr 1e-3 --workers 4
   --curriculum 2:1500,4:1500,12:100000 --advance-at 0.9 --pool 80000"
A=$(echo $A)
WIDE="hidden_size=256,num_hidden_layers=8,num_attention_heads=8,num_key_value_heads=4,intermediate_size=768"
FORM=scene bash $R/gpu_lookup.sh "$OUT/cap" "${MIN:-8}" "v13||$A" "fresh_tiny||$A --fresh num_hidden_layers=4" \
  "fresh_wide||$A --fresh $WIDE"
for t in "$OUT"/cap/*.tar; do
  name=$(basename "$t" .tar)
  mkdir -p /tmp/m && tar -C /tmp/m -xf "$t"
  python $R/scene_probe_eval.py "/tmp/m/$name" 400 12 2 cuda 2>&1 | grep -v Loading > "$OUT/cap/eval_$name.txt" &
done
wait
rm -f "$OUT"/cap/*.tar
cat "$OUT"/cap/eval_*.txt
tar czf "$OUT/results.tgz" -C "$OUT" cap && rm -rf "$OUT/cap"
