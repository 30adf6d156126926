#!/usr/bin/env bash
# Device call P (nvidia-h200, one GPU), prepared in the fifth session for the next one, NOT run yet:
# issue #6 follow-up, the copy-following repeat expert with a network.
# run(kind=nvidia-h200, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-p.sh
# The shipped command (configs/ecoli-mutation.yaml now sets RepeatMixture follow_copies: true), so one
# fit logs val/bits_per_base (call N: 1.8410), val/repeat_mix_bits_per_base (exact matches; call N:
# 1.7749) and val/repeat_copy_mix_bits_per_base (following copies; order-7 Markov: 1.8630 -> 1.8356).
# Then `repeat-mix --ckpt` re-scores last.ckpt both ways outside Lightning.
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
python3 -c "from biomoe.fasta import Genome; Genome(['data/large/ecoli536_NC_008253.fna.gz'])" || exit 3
mkdir -p $OUT/fit
t0=$(date +%s)
timeout $(( START + 560 - t0 )) python3 cli.py fit --config configs/ecoli-mutation.yaml \
  --trainer.default_root_dir $OUT/fit/runs --trainer.logger.init_args.save_dir $OUT/fit/runs > $OUT/fit/fit.log 2>&1
echo "fit rc=$? wall-clock (process) $(( $(date +%s) - t0 )) s" >> $OUT/fit/fit.log
c=$(ls $OUT/fit/runs/version_*/checkpoints/last.ckpt 2>/dev/null | tail -1)
if [ -n "$c" ]; then
  timeout 20 python3 cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --ckpt "$c" --json $OUT/fit/repeat_mix.json >> $OUT/fit/fit.log 2>&1
  timeout 20 python3 cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --ckpt "$c" --follow-copies \
    --json $OUT/fit/repeat_mix_copies.json >> $OUT/fit/fit.log 2>&1
fi
rm -f $OUT/fit/runs/version_*/checkpoints/*.ckpt
grep -h "rc=\|bits/base alone" $OUT/fit/fit.log | tee $OUT/summary.txt
python3 - $OUT/fit/runs <<'PY' | tee -a $OUT/summary.txt
import csv, glob, sys
rows = list(csv.DictReader(open(sorted(glob.glob(f"{sys.argv[1]}/**/metrics.csv", recursive=True))[-1])))
for r in rows:
    if r.get("val/repeat_copy_mix_bits_per_base"):
        print(r["step"], r["val/bits_per_base"], r["val/repeat_mix_bits_per_base"], r["val/repeat_copy_mix_bits_per_base"])
PY
tar czf /tmp/results-p.tgz -C $OUT fit && rm -rf $OUT/fit && mv /tmp/results-p.tgz $OUT/
