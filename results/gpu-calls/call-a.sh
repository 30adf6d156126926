#!/usr/bin/env bash
# Device call A (nvidia-h200-x2), 2026-11-29. GPU 0: GPU tests, issue #3 acceptance fits, TE-layer
# ablation bench. GPU 1: issue #6 quality run (MoE 5 min, dense on the same tokens).
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-a.sh
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-585} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
(
  export CUDA_VISIBLE_DEVICES=1
  MOE_TIMEOUT=390 DEADLINE=$DEADLINE bash results/quality/run_h200.sh "$OUT/quality" > "$OUT/quality.log" 2>&1
) &
GPU1=$!
export CUDA_VISIBLE_DEVICES=0
timeout 200 python3 -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -15 "$OUT/gpu_tests.log"
timeout 150 python3 -m biomoe.bench --shapes mixtral-2layer --backends grouped --precisions bf16 \
  --skip-hf-eager --layer-ablation --out "$OUT/ablation" > "$OUT/ablation.log" 2>&1
echo "ablation rc=$?"; grep -E "^mixtral|Error" "$OUT/ablation.log" | cut -c1-220
SMOKE_OUT="$OUT/smoke" SMOKE_TIMEOUT=$(( ($(left) - 20) / 4 )) bash tests/gpu/fit_smoke.sh 100 2>&1 | tee "$OUT/smoke.log"
wait $GPU1
tail -30 "$OUT/quality.log"
