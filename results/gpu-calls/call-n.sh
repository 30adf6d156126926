#!/usr/bin/env bash
# Device call N (nvidia-h200-x2), fifth session, one 10-minute command.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-n.sh
#   GPU 0  issue #6: the shipped command, exactly as the README gives it,
#            python cli.py fit --config configs/ecoli-mutation.yaml
#          (network + repeat expert; call M measured 1.7756 with the same config under its variant name),
#          then `cli.py repeat-mix --ckpt last.ckpt` as the outside-Lightning cross-check.
#   GPU 1  (a) `pytest -m gpu tests/gpu` (new since call J: RepeatMixture under TE/bf16);
#          (b) 2-layer bf16 throughput, Lightning single-device vs ExpertParallelStrategy 1x1, now that
#              the cross-mesh gradient clipping uses foreach kernels (call K: 56.3k vs 35.6k tokens/s);
#          (c) the 2-layer fp8-block 1x1 point with the config's own LR warm-up (the runner used to
#              squeeze it to steps/5, which made every 2-layer run spike to loss ~22 at step 2).
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
python3 -c "from biomoe.fasta import Genome; Genome(['data/large/ecoli536_NC_008253.fna.gz'])" || exit 3
mkdir -p $OUT/fit $OUT/gpu1
( export CUDA_VISIBLE_DEVICES=0
  t0=$(date +%s)
  timeout $(( START + 555 - t0 )) python3 cli.py fit --config configs/ecoli-mutation.yaml \
    --trainer.default_root_dir $OUT/fit/runs --trainer.logger.init_args.save_dir $OUT/fit/runs > $OUT/fit/fit.log 2>&1
  echo "fit rc=$? wall-clock (process) $(( $(date +%s) - t0 )) s" >> $OUT/fit/fit.log
  c=$(ls $OUT/fit/runs/version_*/checkpoints/last.ckpt 2>/dev/null | tail -1)
  [ -n "$c" ] && timeout 30 python3 cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --ckpt "$c" \
    --json $OUT/fit/repeat_mix.json >> $OUT/fit/fit.log 2>&1
  rm -f $OUT/fit/runs/version_*/checkpoints/*.ckpt ) &
gpu0=$!

export CUDA_VISIBLE_DEVICES=1
timeout 150 python3 -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider > $OUT/gpu1/gpu-tests.log 2>&1
echo "pytest rc=$?" >> $OUT/gpu1/gpu-tests.log
S="python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --fasta data/large/ecoli536_NC_008253.fna.gz --layers 2 --steps 25 --warmup 10 --timeout 120"
left=$(( START + 540 - $(date +%s) ))
timeout $left $S --layouts single,1x1 --precisions bf16 --out $OUT/gpu1/bf16 > $OUT/gpu1/bf16.log 2>&1
left=$(( START + 540 - $(date +%s) ))
timeout $left $S --layouts 1x1 --precisions fp8-block --out $OUT/gpu1/fp8 > $OUT/gpu1/fp8.log 2>&1
for d in bf16 fp8; do
  python3 -m biomoe.bench.scaling report $OUT/gpu1/$d --out $OUT/gpu1/$d/report > /dev/null 2>&1 && cat $OUT/gpu1/$d/report/scaling.md
done > $OUT/gpu1/report.md
wait $gpu0
{ tail -4 $OUT/gpu1/gpu-tests.log; grep -v "^+" $OUT/gpu1/bf16.log | tail -6; grep -v "^+" $OUT/gpu1/fp8.log | tail -6; \
  grep -h "rc=\|bits/base alone" $OUT/fit/fit.log; } | tee $OUT/summary.txt
tar czf /tmp/results-n.tgz -C $OUT fit gpu1 && rm -rf $OUT/fit $OUT/gpu1 && mv /tmp/results-n.tgz $OUT/
ls -R $OUT
