#!/usr/bin/env bash
# Device call J (nvidia-h200-x2), issue #6 plus the GPU test suite, in one 10-minute command.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-j.sh
#   GPU 0  ecoli-v9-wide768-mut5    v5 (hidden 768, dropout 0.3, wd 1.0, EMA) + 5 % input mutation, 2,600 steps
#   GPU 1  ecoli-v10-wd1-ema-mut5   v2 (hidden 512, wd 1.0, EMA; best 1.8482) + 5 % input mutation, 2,000 steps,
#          then `pytest -m gpu tests/gpu` in the time left (tests added since the last GPU run: AC under
#          fp8-block/fp8-current with dropout, TE's checkpoint once per block, the TE router's ids).
# Each variant is summarised, re-scored outside Lightning and packed by results/quality/run_variants.sh.
set -u
START=$(date +%s)
( OUT=$OUT/gpu0 CALL=j0 BUDGET_S=570 FIRST_GPU=0 bash results/quality/run_variants.sh ecoli-v9-wide768-mut5 \
    > $OUT/gpu0.log 2>&1 ) &
gpu0=$!
sleep 20  # let GPU 0's job index the genome first (both would write the same cache files)
OUT=$OUT/gpu1 CALL=j1 BUDGET_S=360 FIRST_GPU=1 bash results/quality/run_variants.sh ecoli-v10-wd1-ema-mut5 \
  > $OUT/gpu1.log 2>&1
left=$(( START + 575 - $(date +%s) ))
echo "gpu tests: ${left} s left" > $OUT/gpu-tests.log
CUDA_VISIBLE_DEVICES=1 timeout $left python3 -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider \
  >> $OUT/gpu-tests.log 2>&1
echo "pytest rc=$?" >> $OUT/gpu-tests.log
wait $gpu0
tail -5 $OUT/gpu-tests.log
cat $OUT/gpu0/summary.txt $OUT/gpu1/summary.txt 2>/dev/null
# The device returns at most 8 files: keep the two archives (they hold the summaries and logs) and the logs here.
rm -f $OUT/gpu*/summary.txt $OUT/gpu*/*.log
ls -R $OUT
