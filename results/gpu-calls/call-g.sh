#!/usr/bin/env bash
# Device call G (nvidia-h200-x4), session 3: FP8 activation checkpointing, second try (TE's
# checkpoint now gets a plain callable; given the block itself it fell back to torch's, because
# our TE layers are not submodules), then Mixtral-8x7B at full depth, EP=4, fp8-block, 50 steps.
# Beside the test: the fp8-block 1-GPU crash again with CUDA_LAUNCH_BLOCKING=1 to name the kernel.
# run(kind=nvidia-h200-x4, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-g.sh
set -u
export PYTHONUNBUFFERED=1
S="python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --fasta data/large/ecoli536_NC_008253.fna.gz --warmup 10"
t0=$(date +%s)
( CUDA_VISIBLE_DEVICES=1 CUDA_LAUNCH_BLOCKING=1 timeout 100 $S --layers 2 --layouts 1x1 --precisions fp8-block \
    --steps 25 --timeout 90 --out $OUT/blocking > $OUT/blocking.log 2>&1 ) &
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_te.py -k "activation_checkpointing" 2>&1 | grep -E "passed|failed|Error|assert" | head -8
wait
grep -v "^+" $OUT/blocking.log | cut -c1-400
grep -B2 -A3 "illegal\|Error" $OUT/blocking/*/fit.log | grep -E "File|Error|illegal" | tail -12 | cut -c1-250
echo "== $(( $(date +%s) - t0 )) s"
$S --layers 32 --layouts 1x4 --precisions fp8-block --steps 50 --activation-checkpointing --timeout 170 --out $OUT/raw 2>&1 | grep -v "^+"
grep -E "Error|error:" $OUT/raw/*/fit.log | head -4 | cut -c1-300
echo "== $(( $(date +%s) - t0 )) s"
tar czf /tmp/results.tgz -C "$OUT" . && rm -rf "$OUT"/* && mv /tmp/results.tgz "$OUT/"
