#!/usr/bin/env bash
# E. coli 536 quality variants on a multi-GPU machine: one `python cli.py fit --config
# configs/ecoli-variants/NAME.yaml` per GPU (CUDA_VISIBLE_DEVICES=0..N-1), all at once. Then a
# compact summary (steps, wall-clock, tokens/s, last/best held-out bits/base, the held-out curve),
# each last.ckpt re-scored outside Lightning (must match its last validation) and every ensemble of
# the models (mean of probabilities) scored. Needs `make data` (data/large/).
#   OUT=dir BUDGET_S=seconds bash scripts/run_variants.sh NAME...
# FIRST_GPU=k puts the first variant on GPU k (default 0); FIT_ARGS are appended to every fit;
# REPEAT_MIX=1 also scores each last.ckpt with `cli.py repeat-mix`; KEEP_CKPT=1 keeps the
# checkpoints (deleted by default: the summary and metrics are what the runs are for).
# SKIP_FIT=1 summarises existing $OUT/NAME/ folders; ENS_BATCH and ENS_LIMIT_BATCHES size the
# ensemble scoring (for a quick check on CPU).
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT}
START=$(date +%s)
DEADLINE=$(( START + ${BUDGET_S:-520} ))
V=configs/ecoli-variants
VARIANTS=("$@")
[ ${#VARIANTS[@]} -ge 1 ] || { echo "usage: run_variants.sh NAME... (configs in configs/ecoli-variants/NAME.yaml)" >&2; exit 2; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
$PY -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
# Decompress and index the genome once, so four processes do not all write the same cache files.
$PY -c "from biomoe.data.sources.genome import Genome; Genome(['data/large/ecoli536_NC_008253.fna.gz'])" || exit 3

if [ -z "${SKIP_FIT:-}" ]; then  # SKIP_FIT=1: summarise and pack existing $OUT/<name>/ folders (testing)
  pids=()
  for i in "${!VARIANTS[@]}"; do
    n=${VARIANTS[$i]}
    ( export CUDA_VISIBLE_DEVICES=$(( ${FIRST_GPU:-0} + i ))
      t0=$(date +%s)
      timeout $(( DEADLINE - t0 - 45 )) $PY cli.py fit --config "$V/$n.yaml" ${FIT_ARGS:-} \
        --trainer.default_root_dir "$OUT/$n" --trainer.logger.init_args.save_dir "$OUT/$n" > "$OUT/$n.log" 2>&1
      echo "fit rc=$? wall-clock (process) $(( $(date +%s) - t0 )) s" >> "$OUT/$n.log" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
fi

# Per variant: steps reached, process wall-clock, last and best held-out bits/base (step), mean train
# bits/base over the last 100 steps (dropout on), median tokens/s. Failed runs show their log's tail.
$PY - "$OUT" "${VARIANTS[@]}" <<'PY' 2>&1 | tee "$OUT/summary.txt"
import csv, glob, re, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
for n in names:
    log = open(f"{out}/{n}.log", errors="replace").read() if glob.glob(f"{out}/{n}.log") else ""
    wall = re.findall(r"fit rc=(\d+) wall-clock \(process\) (\d+) s", log)
    rc, secs = wall[-1] if wall else ("?", "?")
    files = sorted(glob.glob(f"{out}/{n}/**/metrics.csv", recursive=True))
    if not files:
        print(f"{n}: rc={rc} {secs}s NO METRICS"); print("\n".join("  | " + l[:200] for l in log.splitlines()[-8:])); continue
    rows = list(csv.DictReader(open(files[-1])))
    val = [(int(r["step"]) + 1, float(r["val/bits_per_base"])) for r in rows if r.get("val/bits_per_base")]
    train = [(int(r["step"]) + 1, float(r["train/bits_per_base"])) for r in rows if r.get("train/bits_per_base")]
    tps = [float(r["train/tokens_per_s"]) for r in rows if r.get("train/tokens_per_s")]
    steps = max([s for s, _ in val + train] or [0])
    tail = [b for s, b in train if s > steps - 100]
    last_train = statistics.mean(tail) if tail else float("nan")
    best = min(val, key=lambda x: x[1]) if val else (0, float("nan"))
    lastv = val[-1] if val else (0, float("nan"))
    print(f"{n}: rc={rc} steps={steps} {secs}s {statistics.median(tps) / 1e3 if tps else 0:.0f}k tok/s | "
          f"val last {lastv[1]:.4f}@{lastv[0]} best {best[1]:.4f}@{best[0]} | train(last100) {last_train:.4f}")
    print("  val: " + " ".join(f"{b:.4f}" for _, b in val))
    mix = [(int(r["step"]) + 1, float(r["val/repeat_mix_bits_per_base"])) for r in rows
           if r.get("val/repeat_mix_bits_per_base")]
    if mix:  # the RepeatMixture callback ran: the same network mixed with the repeat expert
        print("  val with the repeat expert: " + " ".join(f"{b:.4f}" for _, b in mix))
    if rc != "0":
        print("\n".join("  | " + l[:200] for l in log.splitlines()[-8:]))
PY

# Re-score each last.ckpt on the held-out split and score the ensembles (mean probability).
CKPTS=()
for n in "${VARIANTS[@]}"; do
  c=$(ls "$OUT/$n"/version_*/checkpoints/last.ckpt 2>/dev/null | tail -1); [ -n "$c" ] && CKPTS+=("$c")
done
left=$(( DEADLINE - $(date +%s) ))
if [ "${#CKPTS[@]}" -ge 1 ] && [ "$left" -gt 15 ]; then
  timeout "$left" $PY - "${CKPTS[@]}" <<'PY' 2>&1 | grep -v Warning | tee -a "$OUT/summary.txt"
import itertools, math, os, sys, torch
from biomoe.data.datamodule import GenomeDataModule
from biomoe.inference.load import load_model
from biomoe.model.losses import LN2, per_position_log_likelihood
dev = "cuda" if torch.cuda.is_available() else "cpu"
dm = GenomeDataModule(fasta=["data/large/ecoli536_NC_008253.fna.gz"], seq_length=1024,
                      batch_size=int(os.environ.get("ENS_BATCH", "64")),
                      val_fraction=0.1, num_workers=0)
dm.setup("validate")
batches = list(dm.val_dataloader())[: int(os.environ.get("ENS_LIMIT_BATCHES", "0")) or None]
lls, names = [], []
for path in sys.argv[1:]:
    name = path.split(os.sep)[-4]  # OUT/<name>/version_0/checkpoints/last.ckpt
    model = load_model(path, map_location="cpu").to(dev)
    out = []
    with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        for b in batches:
            ll = per_position_log_likelihood(model(b["input_ids"].to(dev)).logits, b["labels"].to(dev))
            out.append(ll[b["loss_mask"].to(dev).bool()].float())
    lls.append(torch.cat(out)); names.append(name)
    del model
    print(f"re-scored {name}: {-lls[-1].mean().item() / LN2:.4f} bits/base on {lls[-1].numel():,} bases")
for k in range(2, len(lls) + 1):
    for idx in itertools.combinations(range(len(lls)), k):
        ens = torch.logsumexp(torch.stack([lls[i] for i in idx]), 0) - math.log(k)
        print(f"ensemble {'+'.join(names[i].split('-')[1] for i in idx)}: {-ens.mean().item() / LN2:.4f}")
PY
fi
if [ -n "${REPEAT_MIX:-}" ]; then  # each last.ckpt alone and with the repeat expert (biomoe/genomics/repeat_expert.py)
  for c in "${CKPTS[@]}"; do
    left=$(( DEADLINE - $(date +%s) )); [ "$left" -gt 20 ] || break
    timeout "$left" $PY cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --ckpt "$c" \
      --json "$(dirname "$c")/../repeat_mix.json" 2>&1 | grep -v Warning | tee -a "$OUT/summary.txt"
  done
fi
echo "total $(( $(date +%s) - START )) s" | tee -a "$OUT/summary.txt"
[ -n "${KEEP_CKPT:-}" ] || find "$OUT" -name "*.ckpt" -delete
ls "$OUT"
