#!/usr/bin/env bash
# Acceptance run on one GPU (issue #3): a shortened configs/dna-small.yaml fit per precision,
# printing the fast-path lines biomoe logs and the logged training loss. Usage (repo root):
#   bash tests/gpu/fit_smoke.sh [steps] [precisions...]
set -o pipefail
steps=${1:-60}; shift || true
precisions=${*:-bf16 fp8-current fp8-block fp8-delayed}
fasta='[data/lambda_virus.fa.gz,data/yeast_chrI.fna.gz]'
[ -f data/large/ecoli536_NC_008253.fna.gz ] && fasta='[data/large/ecoli536_NC_008253.fna.gz]'
for p in $precisions; do
  root=runs/smoke-$p; mkdir -p runs
  echo "=== precision $p ==="
  timeout 150 python3 cli.py fit --config configs/dna-small.yaml --trainer.max_steps "$steps" \
    --trainer.limit_val_batches 2 --trainer.log_every_n_steps 5 --data.fasta "$fasta" \
    --data.seq_length 2048 --data.stride 1024 --model.config.precision "$p" \
    > "$root.log" 2>&1; rc=$?
  grep -E "biomoe fast path|error|Error" "$root.log" | grep -v Warning | head -8
  python3 - "$root" "$rc" <<'PY'
import csv, glob, sys
root, rc = sys.argv[1], sys.argv[2]
import os
files = sorted(glob.glob("runs/dna-small/**/metrics.csv", recursive=True), key=os.path.getmtime)
rows = list(csv.DictReader(open(files[-1]))) if files else []  # the run that just finished
loss = [(int(r["step"]), float(r["train/loss"])) for r in rows if r.get("train/loss")]
tps = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
print(f"exit={rc} steps logged={len(loss)} loss: " + " ".join(f"{s}:{l:.3f}" for s, l in loss))
if loss:
    print(f"first={loss[0][1]:.3f} last={loss[-1][1]:.3f} falling={loss[-1][1] < loss[0][1]}"
          + (f" tokens/s(last)={tps[-1]:.0f}" if tps else ""))
PY
done
