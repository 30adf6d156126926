#!/usr/bin/env bash
# Device call L (nvidia-h200-x2), the session's last device time (~11 min left): one command.
# run(kind=nvidia-h200-x2, carry=[".te","data/large"], timeout_s=560):  source .te/setup.sh && bash results/gpu-calls/call-l.sh
#   GPU 0  issue #6: ecoli-v12-wide768-mut10 (hidden 768, dropout 0.3, 10 % input mutation, 2,300 steps).
#   GPU 1  why 2-layer fp8-block diverges on ONE GPU (call K: loss 4.5, 2.1, 20.7 at step 2, NaN from
#          step 12; no crash since the router counts experts from the routed ids). One GPU is the only
#          layout that runs TE's padded permute, so:
#          (a) the new GPU test: gradients through TE's padded permute/unpermute vs the local dispatcher;
#          (b) the repro with dispatch_backend=torch (TE router, TE experts, torch permutation);
#          (c) the repro with router_backend=torch (TE permutation kept).
set -u
START=$(date +%s)
( OUT=$OUT/gpu0 CALL=l0 BUDGET_S=525 FIRST_GPU=0 bash results/quality/run_variants.sh ecoli-v12-wide768-mut10 \
    > $OUT/gpu0.log 2>&1 ) &
gpu0=$!
sleep 20
export CUDA_VISIBLE_DEVICES=1
D=$OUT/diverge; mkdir -p $D
timeout 120 python3 -m pytest tests/gpu/test_te.py -q -k "dispatcher" -p no:cacheprovider > $D/pytest.log 2>&1
echo "pytest rc=$?" >> $D/pytest.log
R="python3 -m biomoe.bench.scaling run --config configs/mixtral-8x7b-ep8.yaml --layers 2 --layouts 1x1 --precisions fp8-block --steps 30 --warmup 10 --timeout 150 --fasta data/large/ecoli536_NC_008253.fna.gz"
for variant in dispatch_backend=torch router_backend=torch; do
  timeout 170 $R --out $D/${variant%%=*} --cli-args="--model.config.$variant" > $D/${variant%%=*}.log 2>&1
done
python3 - $D > $D/summary.txt 2>&1 <<'PY'
import csv, glob, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/*/*/version_*/metrics.csv")):
    losses = [r["train/loss"][:6] for r in csv.DictReader(open(f)) if r.get("train/loss")]
    print(f.split("/")[-4], " ".join(losses))
PY
{ tail -4 $D/pytest.log; cat $D/summary.txt; } > $OUT/diverge-summary.txt
tar czf /tmp/diverge.tgz -C $D . && rm -rf $D && mv /tmp/diverge.tgz $OUT/
wait $gpu0
rm -f $OUT/gpu0/summary.txt $OUT/gpu0/*.log
cat $OUT/diverge-summary.txt
tail -5 $OUT/gpu0.log
ls -R $OUT
