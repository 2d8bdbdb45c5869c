#!/usr/bin/env bash
# One device call (one H200): the scene-checking chain into a real build. From f16z after gpu_scene_probe.sh's
# curriculum run (carried as .carry/fsc: its probe model with f16z's record), zu2's mend recipe (section 9: 300 steps
# at lr 5e-5, frames, 16-frame crops, zoom-played reading drills with untrained decisions, presence probes) with
# --scene-presence true, side by side:
#   zs:  from fsc;   zs2: from fsc, 600 steps at lr 1e-4;   z0: from f16z itself (no probe warm-up)
# then benchmarks/perception.py on every build and on fsc, seeds 0 and 1 (n = 192 per arm each), all side by side.
#   run(command="bash benchmarks/results/presence/gpu_scene_mend.sh", carry=[".whl", ".carry/f16z", ".carry/fsc"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/scene_mend; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle --scene-presence true"
ZU2="--caption-aug-p 0.9 --stage1-reading 12000 --stage1-presence 30000 --reading-oracle-fraction 0.2
  --drill-decisions false --search-agent zoom --time-budget-s 240"
VARIANTS="zs:$(echo $ZU2)|zs2:$(echo $ZU2) --stage1-steps 600 --stage1-lr 1e-4|z0:$(echo $ZU2) --init-from .carry/f16z/cold_start"
mends /tmp/c "$(capmend_args .carry/fsc/cold_start)"
mkdir -p /tmp/c/fsc && cp -r .carry/fsc/* /tmp/c/fsc/
perceive_both_draws /tmp/c fsc zs zs2 z0
for v in zs zs2 z0; do
  cp /tmp/c/$v/sft_args.json $R/${v}_sft_args.json
  [ -d /tmp/c/$v/cold_start ] && tar czf $OUT/mend_$v.tgz -C /tmp/c $v/cold_start $v/sft_args.json
done
