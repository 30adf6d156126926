#!/usr/bin/env bash
# Device call I (nvidia-h200, one GPU), prepared for the next session, not run yet: where the CLI's
# step time goes. On mixtral-2layer shapes `cli.py fit` under ExpertParallelStrategy trains ~41k
# tokens/s on one GPU against 74k for biomoe `grouped` bf16 in `make bench` (results/scaling).
# 1. The same 2-layer bf16 point under Lightning's default single-device strategy and under
#    ExpertParallelStrategy at 1x1: what FSDP2 + the strategy cost.
# 2. Both again with Lightning's PyTorchProfiler (CUDA time and CPU time tables).
# run(kind=nvidia-h200, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-i.sh
set -u
export PYTHONUNBUFFERED=1
S="python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --fasta data/large/ecoli536_NC_008253.fna.gz --layers 2 --precisions bf16 --steps 25 --warmup 10 --timeout 170"
P="--trainer.profiler=lightning.pytorch.profilers.PyTorchProfiler --trainer.profiler.init_args.export_to_chrome=false --trainer.profiler.init_args.row_limit=40 --trainer.profiler.init_args.filename=prof"
$S --layouts single,1x1 --out $OUT/raw 2>&1 | grep -v "^+"
for layout in single 1x1; do for key in cuda_time_total cpu_time_total; do
  $S --layouts $layout --out $OUT/prof-$key \
    --cli-args="$P --trainer.profiler.init_args.sort_by_key=$key --trainer.profiler.init_args.dirpath=$OUT/prof-$key/tables-$layout" 2>&1 | grep -v "^+"
done; done
python3 -m biomoe.bench.scaling report $OUT/raw --out $OUT/report > /dev/null && cat $OUT/report/scaling.md
for f in $OUT/prof-*/tables-*/*; do echo "== $f"; head -30 "$f" | cut -c1-170; done 2>/dev/null | head -150
tar czf /tmp/results.tgz -C "$OUT" . && rm -rf "$OUT"/* && mv /tmp/results.tgz "$OUT/"
