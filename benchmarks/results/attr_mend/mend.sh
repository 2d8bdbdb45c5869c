#!/usr/bin/env bash
# Direct-answer drill mend of the shipped strong v16: needle / needle_attribute questions whose overview shows the
# needle, answered from the overview, with the call-or-answer decision tokens left untrained (--drill-decisions
# false keeps the calls: ../direct_answers/README.md, E2), plus caption rehearsal. The drills think the way v16's
# build did (fB's data flags, v16's sft_args.json). It starts from the shipped strong cold start: that was v16 when
# the strong v17 was built from it (git 52f0b41); since then it is v17 itself, so pass --init-from to rebuild v17.
# usage: mend.sh --out OUT_DIR [extra sft.py flags]     (later flags win; on one H100 with --device cuda the 150
# steps train in under a minute, the corpus takes about as long)
set -euo pipefail
"${PYTHON:-python}" trainers/sft.py --init-from agents/lmm/checkpoints/tiny-strong/cold_start --preset cpu --seed 1 \
  --caption-max-frames 8,16 --caption-aug-p 0.25 --stage1-frame 500 --stage1-caption 1000 --stage1-direct 0 \
  --stage1-tool 0 --stage1-reading 0 --stage1-direct-needle 2000 --drill-decisions false \
  --oracle-fraction 0 --search-agent sweep --zoom-think sighting --grounded-think true --option-think true \
  --presence-think true --direct-think scene_chain_decide --native-think spread --native-close-think-p 0.3 \
  --stage1-steps 150 --stage1-lr 5e-5 --warmup 10 --batch-size 32 \
  --stage2-steps 0 --stage2-tool 0 --stage2-direct 0 --stage2-frame 0 --stage2-caption 0 \
  "$@"
