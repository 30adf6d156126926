#!/usr/bin/env bash
# Device call F (nvidia-h200-x4), session 3: issue #8 follow-ups to call D.
# run(kind=nvidia-h200-x4, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-f.sh
#  1. GPU tests of the two fixes (FP8 activation checkpointing through TE's checkpoint; TE router ids
#     that follow its routing map) plus the router/dispatch tests they touch.
#  2. The point that crashed in call D (2 layers, fp8-block, 1 GPU), alone, and the bf16 one with
#     Lightning's simple profiler (where the CLI's step time goes).
#  3. Mixtral-8x7B at full depth (32 layers, 46.7B parameters), EP=4 on 4 GPUs, fp8-block,
#     activation checkpointing, 50 steps (failed in call D with CheckpointError).
#  4. make smoke-2gpu's script on 4 GPUs at EP=4: loss falls, distributed checkpoint, resume, export.
#  5. 8 layers in bf16 at dp1xep4 / dp2xep2 (skipped in call D for time).
set -u
export PYTHONUNBUFFERED=1
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-530} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
CFG=configs/mixtral-8x7b-ep8.yaml
S="python3 -m biomoe.bench.scaling run --config $CFG --fasta data/large/ecoli536_NC_008253.fna.gz --steps 25 --warmup 10 --timeout 170"
t0=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_te.py -k "activation_checkpointing or router or permute" 2>&1 | tail -4
echo "== tests done $(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES=0 $S --layers 2 --layouts 1x1 --precisions fp8-block --out $OUT/raw 2>&1 | grep -v "^+" &
CUDA_VISIBLE_DEVICES=1 $S --layers 2 --layouts 1x1 --precisions bf16 --cli-args=--trainer.profiler=simple \
  --out $OUT/profiled > $OUT/profiled.log 2>&1 &
wait; grep -v "^+" $OUT/profiled.log
echo "== 1-GPU done $(( $(date +%s) - t0 )) s"
if [ "$(left)" -gt 200 ]; then
  $S --layers 32 --layouts 1x4 --precisions fp8-block --steps 50 --activation-checkpointing \
    --timeout $(( $(left) - 150 )) --out $OUT/raw 2>&1 | grep -v "^+"
fi
echo "== 32-layer done $(( $(date +%s) - t0 )) s"
if [ "$(left)" -gt 110 ]; then
  timeout $(( $(left) - 20 )) python3 scripts/smoke_2gpu.py -- --trainer.devices=4 \
    --trainer.strategy.init_args.expert_parallel_size=4 > $OUT/smoke-4gpu.log 2>&1
  echo "smoke rc=$?"; grep -E "loss:|distributed checkpoint|resume:|consolidated|SMOKE" $OUT/smoke-4gpu.log | cut -c1-300
fi
echo "== smoke done $(( $(date +%s) - t0 )) s"
[ "$(left)" -gt 100 ] && $S --layers 8 --layouts 1x4,2x2 --precisions bf16 --out $OUT/raw 2>&1 | grep -v "^+"
echo "== all done $(( $(date +%s) - t0 )) s"
for f in $OUT/raw/*/fit.log; do grep -E "Error|error:" "$f" | head -3 | cut -c1-300 | sed "s|^|$(basename $(dirname $f)): |"; done
grep -A25 "Profiler Report\|Action  " $OUT/profiled/*/fit.log | head -40 | cut -c1-160
find "$OUT" -name "*.ckpt" -prune -exec rm -rf {} + 2>/dev/null
tar czf /tmp/results.tgz -C "$OUT" . && rm -rf "$OUT"/* && mv /tmp/results.tgz "$OUT/"
