#!/usr/bin/env bash
# Direct-answer drill mend: needle / needle_attribute questions whose overview shows the needle, answered from the
# overview, with the call-or-answer decision tokens left untrained (--no-drill-decisions keeps the calls; --drill-decisions
# teaches the model to answer instead), plus caption rehearsal. The drills think the way the build before it did
# (its sft_args.json). It starts from the shipped strong cold start unless --init-from says otherwise.
# usage: mend.sh --out OUT_DIR [extra sft.py flags]     (later flags win; on one H100 with --device cuda the 150
# steps train in under a minute, the corpus takes about as long)
set -euo pipefail
"${PYTHON:-python}" trainers/sft.py --init-from agents/lmm/checkpoints/tiny-strong/cold_start --preset cpu --seed 1 \
  --caption-max-frames 8,16 --caption-aug-p 0.25 --stage1-frame 500 --stage1-caption 1000 --stage1-direct 0 \
  --stage1-tool 0 --stage1-reading 0 --stage1-direct-needle 2000 --no-drill-decisions \
  --oracle-fraction 0 --search-agent sweep --zoom-think sighting --grounded-think --option-think \
  --presence-think --direct-think scene_chain_decide --native-think spread --native-close-think-p 0.3 \
  --stage1-steps 150 --stage1-lr 5e-5 --warmup 10 --batch-size 32 \
  --stage2-steps 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 \
  "$@"
