#!/usr/bin/env bash
# Device call C (nvidia-h200-x2), 2026-11-29: issue #6 quality runs, one per GPU, each followed by
# its dense control on the same tokens. GPU 0: configs/ecoli-quality.yaml (the 5-minute comparison).
# GPU 1: configs/ecoli-long.yaml. Everything returns as one archive.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-c.sh
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-470} ))
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
( export CUDA_VISIBLE_DEVICES=1 SKIP_MARKOV=1 MOE_TIMEOUT=330 DEADLINE
  bash results/quality/run_h200.sh "$OUT/long" configs/ecoli-long.yaml > "$OUT/long.log" 2>&1 ) &
GPU1=$!
( export CUDA_VISIBLE_DEVICES=0 MOE_TIMEOUT=320 DEADLINE
  bash results/quality/run_h200.sh "$OUT/quality" configs/ecoli-quality.yaml > "$OUT/quality.log" 2>&1 ) &
GPU0=$!
wait $GPU0 $GPU1
for f in quality long; do echo "== $f"; grep -E "max_steps|wall-clock|metrics.csv|total" "$OUT/$f.log" | cut -c1-900; done
tar czf /tmp/results.tgz --exclude='*.ckpt' -C "$OUT" . && rm -rf "$OUT"/quality "$OUT"/long && mv /tmp/results.tgz "$OUT/"
