#!/usr/bin/env bash
# Device call O (nvidia-h200-x2), fifth session, the last ~8 minutes of device time.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-o.sh
# (a) `pytest -m gpu tests/gpu` again: call N's one failure was the RepeatMixture test calling TE on a
#     module Lightning had moved back to the CPU after validate() (the test now moves it back).
# (b) 2-layer Mixtral on 2 GPUs, EP=2 and DP=2, bf16 and fp8-block, with the config's own LR warm-up
#     (the committed 2-GPU numbers were measured with the runner's squeezed warm-up and its step-2
#     loss spike; call N re-measured the 1-GPU points: 36.0k bf16, 30.4k fp8-block at 1x1).
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
mkdir -p $OUT/o
CUDA_VISIBLE_DEVICES=0 timeout 140 python3 -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider > $OUT/o/gpu-tests.log 2>&1
echo "pytest rc=$?" >> $OUT/o/gpu-tests.log
left=$(( START + 400 - $(date +%s) ))
timeout $left python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml \
  --fasta data/large/ecoli536_NC_008253.fna.gz --layers 2 --steps 25 --warmup 10 --timeout 100 \
  --layouts 1x2,2x1 --precisions bf16,fp8-block --out $OUT/o/scaling > $OUT/o/scaling.log 2>&1
echo "scaling rc=$?" >> $OUT/o/scaling.log
python3 -m biomoe.bench.scaling report $OUT/o/scaling --out $OUT/o/report > /dev/null 2>&1; cat $OUT/o/report/scaling.md > $OUT/o/report.md 2>/dev/null
{ tail -3 $OUT/o/gpu-tests.log; grep -v "^+" $OUT/o/scaling.log | tail -8; cat $OUT/o/report.md; } | tee $OUT/summary.txt
tar czf /tmp/results-o.tgz -C $OUT o && rm -rf $OUT/o && mv /tmp/results-o.tgz $OUT/
