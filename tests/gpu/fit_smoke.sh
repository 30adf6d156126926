#!/usr/bin/env bash
# Smoke run on one GPU: `python cli.py fit --config configs/dna-small.yaml` (E. coli,
# seq 8192, micro-batch 2) cut to [steps] steps, once per precision. Prints the fast-path lines biomoe
# logs and the logged training loss. Without `make data` it falls back to the bundled lambda + yeast
# genomes at seq 2048. Usage (repo root):  bash tests/gpu/fit_smoke.sh [steps] [precisions...]
# Env: SMOKE_OUT (default runs/smoke) holds the logs; SMOKE_TIMEOUT (default 240 s) per precision.
set -o pipefail
steps=${1:-100}; shift || true
precisions=${*:-bf16 fp8-current fp8-block fp8-delayed}
out=${SMOKE_OUT:-runs/smoke}; mkdir -p "$out"
data_args=()
if [ ! -f data/large/ecoli536_NC_008253.fna.gz ]; then
  data_args=(--data.fasta '[data/lambda_virus.fa.gz,data/yeast_chrI.fna.gz]' --data.seq_length 2048 --data.stride 1024)
fi
for p in $precisions; do
  root="$out/$p"; rm -rf "$root"
  echo "=== precision $p ==="
  timeout "${SMOKE_TIMEOUT:-240}" python3 cli.py fit --config configs/dna-small.yaml --trainer.max_steps "$steps" \
    --trainer.val_check_interval "$steps" --trainer.limit_val_batches 4 --trainer.num_sanity_val_steps 0 \
    --trainer.log_every_n_steps 10 --trainer.default_root_dir "$root" --trainer.logger.init_args.save_dir "$root" \
    --model.runtime.precision "$p" "${data_args[@]}" > "$root.log" 2>&1; rc=$?
  grep -E "biomoe kernels|biomoe, first forward|rror" "$root.log" | grep -v Warning | head -8
  find "$root" -name "*.ckpt" -delete 2>/dev/null
  python3 - "$root" "$rc" <<'PY'
import csv, glob, sys
root, rc = sys.argv[1], sys.argv[2]
files = glob.glob(f"{root}/**/metrics.csv", recursive=True)
rows = list(csv.DictReader(open(files[0]))) if files else []
loss = [(int(r["step"]), float(r["train/loss"])) for r in rows if r.get("train/loss")]
tps = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
val = [float(r["val/bits_per_base"]) for r in rows if r.get("val/bits_per_base")]
print(f"exit={rc} steps logged={len(loss)} loss: " + " ".join(f"{s}:{l:.3f}" for s, l in loss))
if loss:
    print(f"first={loss[0][1]:.3f} last={loss[-1][1]:.3f} falling={loss[-1][1] < loss[0][1]}"
          + (f" tokens/s(median)={sorted(tps)[len(tps) // 2]:.0f}" if tps else "")
          + (f" val bits/base={val[-1]:.3f}" if val else ""))
PY
done
