#!/usr/bin/env bash
# Device call D (nvidia-h200-x4), session 3: issue #8 scaling on 4 GPUs with the training CLI.
# run(kind=nvidia-h200-x4, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-d.sh
# Config: configs/mixtral-8x7b-ep8.yaml (Mixtral-8x7B shape, seq 4096, micro-batch 1 per GPU,
# bf16-true, meta init), depth overridden to 2 and 8 layers, then the full 32 layers at EP=4.
# Phase A runs the four 1-GPU baselines at once (one per GPU) and phase B the two 2-GPU runs at once;
# each result records that in "concurrent". Phase C runs alone. Phase D re-runs two baselines alone.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-520} ))
CFG=configs/mixtral-8x7b-ep8.yaml
FASTA=data/large/ecoli536_NC_008253.fna.gz
RAW=$OUT/raw; mkdir -p "$RAW"
S="python3 -m biomoe.bench.scaling run --config $CFG --fasta $FASTA --steps 25 --warmup 10 --timeout 170 --out $RAW"
left() { echo $(( DEADLINE - $(date +%s) )); }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
t0=$(date +%s)
# A: 1-GPU baselines, four at once
( CUDA_VISIBLE_DEVICES=0 $S --layers 2 --layouts 1x1 --precisions bf16 --concurrent "3 other 1-GPU runs" ) > "$OUT/a0.log" 2>&1 &
( CUDA_VISIBLE_DEVICES=1 $S --layers 2 --layouts 1x1 --precisions fp8-block --concurrent "3 other 1-GPU runs" ) > "$OUT/a1.log" 2>&1 &
( CUDA_VISIBLE_DEVICES=2 $S --layers 8 --layouts 1x1 --precisions fp8-block --concurrent "3 other 1-GPU runs" ) > "$OUT/a2.log" 2>&1 &
( CUDA_VISIBLE_DEVICES=3 $S --layers 8 --layouts 1x1 --precisions bf16 --concurrent "3 other 1-GPU runs" ) > "$OUT/a3.log" 2>&1 &
wait; echo "phase A $(( $(date +%s) - t0 )) s"; cat "$OUT"/a?.log | grep -v "^+"
# B: 2-GPU EP=2, two at once
( CUDA_VISIBLE_DEVICES=0,1 $S --layers 2 --layouts 1x2 --precisions bf16 --concurrent "1 other 2-GPU run" ) > "$OUT/b0.log" 2>&1 &
( CUDA_VISIBLE_DEVICES=2,3 $S --layers 2 --layouts 1x2 --precisions fp8-block --concurrent "1 other 2-GPU run" ) > "$OUT/b1.log" 2>&1 &
wait; echo "phase B $(( $(date +%s) - t0 )) s"; cat "$OUT"/b?.log | grep -v "^+"
# C: 4 GPUs, alone
for spec in "2 bf16" "2 fp8-block" "8 fp8-block" "8 bf16"; do
  set -- $spec
  [ "$(left)" -lt 200 ] && { echo "skip $spec: $(left) s left"; continue; }
  $S --layers $1 --layouts 1x4,2x2 --precisions $2 2>&1 | grep -v "^+"
done
echo "phase C $(( $(date +%s) - t0 )) s"
# Full depth: Mixtral-8x7B (32 layers, 46.7B parameters) at EP=4 in FP8, activation checkpointing, 50 steps
if [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 20 )) $S --layers 32 --layouts 1x4 --precisions fp8-block --steps 50 \
    --activation-checkpointing --timeout $(( $(left) - 25 )) 2>&1 | grep -v "^+"
else echo "skip 32-layer: $(left) s left"; fi
echo "phase D $(( $(date +%s) - t0 )) s"
# D: baselines alone, if time is left (how much phase A's sharing cost)
for spec in "2 bf16" "2 fp8-block"; do
  set -- $spec
  [ "$(left)" -lt 50 ] && { echo "skip alone $spec: $(left) s left"; continue; }
  CUDA_VISIBLE_DEVICES=0 $S --layers $1 --layouts 1x1 --precisions $2 --out $OUT/alone 2>&1 | grep -v "^+"
done
python3 -m biomoe.bench.scaling report "$RAW" --out "$OUT/report" > "$OUT/report.log" 2>&1; cat "$OUT/report/scaling.md"
[ -d "$OUT/alone" ] && python3 -m biomoe.bench.scaling report "$OUT/alone" --out "$OUT/alone-report" > /dev/null 2>&1 && cat "$OUT/alone-report/scaling.md"
for f in "$RAW"/*/fit.log; do grep -iE "error|Traceback|fast path|fallback|experts" "$f" | head -4 | cut -c1-300 | sed "s|^|$(basename $(dirname $f)): |"; done | head -60
find "$OUT" -name "*.ckpt" -prune -exec rm -rf {} + 2>/dev/null
tar czf /tmp/results.tgz -C "$OUT" . && rm -rf "$OUT"/* && mv /tmp/results.tgz "$OUT/"
