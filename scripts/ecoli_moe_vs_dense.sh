#!/usr/bin/env bash
# An MoE run on E. coli 536 (default configs/ecoli-quality.yaml), then its dense control on exactly
# the MoE run's tokens: the same config with dense MLPs of the same active width (top_k x ffn), the
# same data order and the number of steps the MoE run reached. Also the order-0..8 Markov table.
# Summarises every run's held-out curve at the end. Needs `make data` (data/large/) and one GPU.
#   bash scripts/ecoli_moe_vs_dense.sh OUT_DIR [MOE_CONFIG]
# Env: PY (default python3); EXTRA_ARGS (e.g. "--model.config.dropout 0.1") go to both fits;
# MOE_TIMEOUT / DENSE_TIMEOUT (s) are hard guards and DEADLINE (epoch seconds) caps the dense run;
# SKIP_DENSE=1 runs the MoE model only; SKIP_MARKOV=1 skips the table.
set -uo pipefail
OUT=${1:?usage: scripts/ecoli_moe_vs_dense.sh OUT_DIR [MOE_CONFIG]}
MOE_CONFIG=${2:-configs/ecoli-quality.yaml}
PY=${PY:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader -i "${CUDA_VISIBLE_DEVICES:-0}" || true
$PY -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
$PY -c "from lightning.pytorch.cli import _JSONARGPARSE_SIGNATURES_AVAILABLE as ok; assert ok, ok" || exit 3
name=$(basename "$MOE_CONFIG" .yaml)

start=$(date +%s)
MARKOV_PID=
[ -z "${SKIP_MARKOV:-}" ] && { $PY cli.py markov data/large/ecoli536_NC_008253.fna.gz --max-order 8 \
  --json "$OUT/markov.json" > "$OUT/markov.log" 2>&1 & MARKOV_PID=$!; }

timeout "${MOE_TIMEOUT:-420}" $PY cli.py fit --config "$MOE_CONFIG" \
  --trainer.default_root_dir "$OUT/$name" --trainer.logger.init_args.save_dir "$OUT/$name" ${EXTRA_ARGS:-} 2>&1 | tee "$OUT/$name.log"
t1=$(date +%s); echo "moe wall-clock (process) $((t1 - start)) s"
# Lightning's "`Trainer.fit` stopped: `max_steps=N` reached." only: a TimeBudget's planned
# "max_steps=N" is printed early too, and is not the step count of a run cut short by time.
steps=$(grep -o '`max_steps=[0-9]*` reached' "$OUT/$name.log" | tail -1 | tr -dc '0-9')
[ -z "$steps" ] && echo "the MoE run did not end at max_steps (time limit or error): no dense control"
if [ -n "$steps" ] && [ -z "${SKIP_DENSE:-}" ]; then
  # Dense control on the same tokens: the MoE config with dense MLPs of top_k x ffn width (the same
  # active parameters per token), the MoE run's step count, no TimeBudget.
  $PY - "$MOE_CONFIG" "$steps" "$OUT/dense-same-tokens.yaml" <<'PY'
import sys, yaml
src, steps, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = yaml.safe_load(open(src))
model = cfg["model"]["config"]
model["moe_layers"] = []
model["dense_ffn_hidden_size"] = model["top_k"] * model["ffn_hidden_size"]
cfg["trainer"]["callbacks"] = [c for c in cfg["trainer"]["callbacks"]
                               if not c["class_path"].endswith("TimeBudget")]
cfg["trainer"]["max_steps"] = steps
cfg["trainer"]["max_time"] = None
yaml.safe_dump(cfg, open(dest, "w"), sort_keys=False)
print(f"dense control: max_steps={steps} (the MoE run's), dense_ffn_hidden_size={model['dense_ffn_hidden_size']}")
PY
  dense_timeout=${DENSE_TIMEOUT:-300}
  [ -n "${DEADLINE:-}" ] && dense_timeout=$(( DEADLINE - $(date +%s) - 5 ))
  if [ -n "${DEADLINE:-}" ] && [ "$dense_timeout" -lt 1 ]; then  # timeout: negative is an error, 0 "no limit"
    echo "dense control skipped: DEADLINE leaves no time ($dense_timeout s)"
  else
    timeout "$dense_timeout" $PY cli.py fit --config "$OUT/dense-same-tokens.yaml" \
      --trainer.default_root_dir "$OUT/dense" --trainer.logger.init_args.save_dir "$OUT/dense" ${EXTRA_ARGS:-} 2>&1 | tee "$OUT/dense.log"
    echo "dense wall-clock (process) $(( $(date +%s) - t1 )) s"
  fi
fi
[ -n "$MARKOV_PID" ] && wait $MARKOV_PID
$PY - "$OUT" <<'PY'
import csv, glob, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/**/metrics.csv", recursive=True)):
    rows = list(csv.DictReader(open(f)))
    val = [(r["step"], float(r["val/bits_per_base"]), r.get("val/markov_bits_per_base")) for r in rows
           if r.get("val/bits_per_base")]
    print(f, " ".join(f"{s}:{b:.4f}" for s, b, _ in val), "| markov", val[-1][2] if val else None)
PY
echo "total $(( $(date +%s) - start )) s"
