#!/usr/bin/env bash
# One short device call (the session's last 440 s): gpu_scene_mix.sh's s3 mend lost every tool call, as did its
# plain-chain control. The same mend with 6,000 zoom-played tool traces in the mix (the call turn trained), then
# perception (seed 0, n = 192 per arm) and the held-out scene probes (scene_probe_eval.py, 400). Returns
# results.tgz and the build (build.tgz).
#   run(command="bash benchmarks/results/presence/gpu_scene_mix_tool.sh", carry=[".whl", ".carry/f16z"])
set -u
. benchmarks/results/presence/device_lib.sh
install_carried_wheels
R=$OUT/scene_mix_tool; mkdir -p $R
THINK="--grounded-think true --option-think true --presence-think true --direct-think needle"
MIX="--caption-aug-p 0.9 --stage1-reading 12000 --stage1-presence 150000 --reading-oracle-fraction 0.2
  --search-agent zoom --stage1-steps 2500 --warmup 100 --time-budget-s ${BUDGET:-250} --workers 15"
VARIANTS="s3t:$(echo $MIX) --scene-presence true --stage1-lr 3e-4 --drill-decisions false --stage1-tool 6000"
mends /tmp/c "$(capmend_args .carry/f16z/cold_start)"
grep -a "corpus ready\|stage1 step\|done in" $R/mend_s3t.log
python3 benchmarks/perception.py --checkpoint /tmp/c/s3t/cold_start --frames 0 --crops 100 --env-default-crops 100 \
  --visible 40 --tool-episodes 96 --device cuda --seed 0 --json $R/perc_s3t_s0.json > $R/perc_s3t_s0.log 2>&1 &
python3 benchmarks/results/reading_experiments/scene_probe_eval.py /tmp/c/s3t/cold_start 400 12 2 cuda \
  2>&1 | grep -v Loading > $R/scene_probe_s3t.txt &
wait
cat $R/scene_probe_s3t.txt
grep -E "object F1 \(|default env|direct answers|tool gain|calls/ep" $R/perc_s3t_s0.md
cp /tmp/c/s3t/sft_args.json $R/
tar czf $OUT/results.tgz -C $OUT scene_mix_tool && rm -rf $R
tar czf $OUT/build.tgz -C /tmp/c s3t/cold_start s3t/sft_args.json
