#!/usr/bin/env bash
# Device call K (nvidia-h200-x2), one 10-minute command.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-k.sh
#   GPU 0  issue #6: ecoli-v11-wd1-ema-mut10-long (hidden 512, 10 % input mutation, 3,600 steps).
#   GPU 1  (a) the 1-GPU fp8-block crash repro (2-layer mixtral, it diverged and then hit an illegal
#              memory access in TE's padded permute 3 times out of 3), now that the TE router counts
#              experts from the routed ids instead of the routing map;
#          (b) call-i.sh: where the CLI's step time goes (single-device strategy vs ExpertParallelStrategy
#              1x1, with PyTorchProfiler tables).
set -u
START=$(date +%s)
( OUT=$OUT/gpu0 CALL=k0 BUDGET_S=570 FIRST_GPU=0 bash results/quality/run_variants.sh ecoli-v11-wd1-ema-mut10-long \
    > $OUT/gpu0.log 2>&1 ) &
gpu0=$!
sleep 20  # GPU 0's job indexes the genome first
export CUDA_VISIBLE_DEVICES=1
mkdir -p $OUT/crash
timeout 200 python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --layers 2 --layouts 1x1 \
  --precisions fp8-block --steps 30 --warmup 10 --timeout 170 --out $OUT/crash/run \
  --fasta data/large/ecoli536_NC_008253.fna.gz > $OUT/crash/repro.log 2>&1
echo "repro rc=$?" >> $OUT/crash/repro.log
{ grep -v "^+" $OUT/crash/repro.log | tail -15; for f in $(find $OUT/crash/run -name "*.json"); do echo "== $f"; head -c 1500 $f; echo; done; \
  for f in $(find $OUT/crash/run -name "*.log" -o -name "stderr*"); do echo "== $f"; grep -i "error\|illegal\|Traceback\|loss" $f | tail -12; done; } > $OUT/crash/summary.txt 2>&1
tar czf /tmp/crash.tgz -C $OUT/crash . && rm -rf $OUT/crash && mv /tmp/crash.tgz $OUT/
left=$(( START + 560 - $(date +%s) ))
echo "call-i with ${left} s left" > $OUT/gpu1.log
mkdir -p $OUT/prof && OUT=$OUT/prof timeout $left bash results/gpu-calls/call-i.sh >> $OUT/gpu1.log 2>&1
[ -d $OUT/prof ] && [ ! -f $OUT/prof/results.tgz ] && tar czf /tmp/prof.tgz -C $OUT/prof . && rm -rf $OUT/prof/* && mv /tmp/prof.tgz $OUT/prof/results.tgz
wait $gpu0
rm -f $OUT/gpu0/summary.txt $OUT/gpu0/*.log
tail -40 $OUT/gpu1.log
tail -6 $OUT/gpu0.log
ls -R $OUT
