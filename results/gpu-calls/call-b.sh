#!/usr/bin/env bash
# Device call B (nvidia-h200-x2), 2026-11-29. GPU 0: `make bench` end to end (issue #5), then a
# torch.compile variant if time is left. GPU 1: issue #6 quality run with residual dropout 0.1
# (MoE 5-minute TimeBudget, then dense on the same tokens). Everything returns as one archive.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-b.sh
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-580} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
pack() { cd "$OUT" && tar czf results.tgz --exclude='*.ckpt' --exclude=results.tgz . && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name '*.log' -exec rm -rf {} +; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
(
  export CUDA_VISIBLE_DEVICES=1
  EXTRA_ARGS="--model.config.dropout 0.1" MOE_TIMEOUT=390 DEADLINE=$DEADLINE \
    bash results/quality/run_h200.sh "$OUT/q-dropout0.1" > "$OUT/quality.log" 2>&1
) &
GPU1=$!
export CUDA_VISIBLE_DEVICES=0
python3 -c "import transformers; print('transformers', transformers.__version__)"
timeout $(( $(left) - 10 )) make bench 2>&1 | tee "$OUT/bench.log" | grep -vE "^\s*$" | tail -70
mkdir -p "$OUT/bench" && cp results/bench/bench.json results/bench/bench.md results/bench/*.png "$OUT/bench/" 2>/dev/null
if [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 15 )) python3 -m biomoe.bench --shapes mixtral-2layer --backends grouped --precisions bf16 \
    --skip-hf-eager --compile --out "$OUT/compile" > "$OUT/compile.log" 2>&1
  echo "compile rc=$?"; grep -E "^mixtral" "$OUT/compile.log" | cut -c1-200
fi
wait $GPU1
tail -8 "$OUT/quality.log"
pack
