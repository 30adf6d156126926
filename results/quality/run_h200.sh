#!/usr/bin/env bash
# The one-H200 quality run of issue #6 (MoE for the 5-minute budget, then the dense control on the
# remaining time), writing metrics under $1 (default results/quality/run). Needs the GPU image's
# torch/lightning plus jsonargparse[signatures] (with docstring-parser and typeshed-client: without
# them LightningCLI refuses to start), pyfaidx and biopython on PYTHONPATH. On the device machine:
#   SITE=/tmp/site; python3 -m pip install -q --no-index --no-deps --target $SITE \
#     .te/whl/{annotated,biopython,jsonargparse,pydantic,typing,pyfaidx}*.whl .whl/quality/*.whl
#   PYTHONPATH=$SITE:$PWD BUDGET_END=$(( $(date +%s) + 515 )) bash results/quality/run_h200.sh $OUT
# (.whl/quality/ = `pip download --no-deps -d .whl/quality docstring-parser typeshed-client`;
#  carry [".te", ".whl", "data/large"]).
set -uo pipefail
OUT=${1:-results/quality/run}
BUDGET_END=${BUDGET_END:-$(( $(date +%s) + 500 ))}   # wall-clock deadline for the whole script
PY=${PY:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
$PY -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
$PY -c "from lightning.pytorch.cli import _JSONARGPARSE_SIGNATURES_AVAILABLE as ok; assert ok, ok" || exit 3

start=$(date +%s)
$PY cli.py markov data/large/ecoli536_NC_008253.fna.gz --max-order 8 --json "$OUT/markov.json" &
MARKOV_PID=$!

t0=$(date +%s)
$PY cli.py fit --config configs/ecoli-quality.yaml \
  --trainer.default_root_dir "$OUT/moe" --trainer.logger.init_args.save_dir "$OUT/moe" 2>&1 | tee "$OUT/moe.log"
t1=$(date +%s); echo "moe wall-clock (process) $((t1 - t0)) s"
steps=$(grep -o 'max_steps=[0-9]*' "$OUT/moe.log" | tail -1 | cut -d= -f2)
left=$(( BUDGET_END - $(date +%s) - 45 ))
echo "moe max_steps=${steps:-?}; seconds left for dense: $left"
if [ "$left" -gt 90 ]; then
  # Dense control for the time that is left: its TimeBudget gets (left - start-up) seconds.
  dense_budget=$(( left - 30 ))
  sed "s/        seconds: 300/        seconds: $dense_budget/" configs/ecoli-dense.yaml > "$OUT/ecoli-dense-run.yaml"
  guard=$(printf '00:00:%02d:%02d' $(((dense_budget + 20) / 60)) $(((dense_budget + 20) % 60)))
  $PY cli.py fit --config "$OUT/ecoli-dense-run.yaml" --trainer.max_time "$guard" \
    --trainer.default_root_dir "$OUT/dense" --trainer.logger.init_args.save_dir "$OUT/dense" 2>&1 | tee "$OUT/dense.log"
  t2=$(date +%s); echo "dense wall-clock (process) $((t2 - t1)) s (TimeBudget $dense_budget s, guard $guard)"
fi
wait $MARKOV_PID
find "$OUT" -name "*.ckpt" -delete
echo "total $(( $(date +%s) - start )) s"
