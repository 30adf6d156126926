#!/usr/bin/env bash
# Device call E (nvidia-h200-x4): issue #6, four E. coli 536 quality variants at once, one per GPU,
# each a plain `python cli.py fit --config results/quality/variants/<name>.yaml` MoE run (same split,
# Markov baseline, CSVLogger, validation every 100 steps as configs/ecoli-quality.yaml).
# run(kind=nvidia-h200-x4, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-e.sh
#
# Why these four (results/quality/*/metrics.csv). Held-out bits/base bottom out at 1.845-1.850
# around step 1,000-1,500 in every run so far: MoE or dense, dropout 0.1 or 0.2. At that point the
# training loss (measured with dropout on) is only 0.02-0.04 below held-out, and from there it falls
# fast (to 1.60 by step 2,400 at dropout 0.1, with held-out up to 1.96). So memorisation, not too little
# capacity, sets the floor. Dropout 0.2 only delays it: same floor, later, and held-out rises again
# (1.848 at 1,499 -> 1.857 at 1,800). More of the same (dropout 0.3) is unlikely to move the floor.
# The knobs not tried yet, and what data-constrained LM training found to help (Kim et al. 2025,
# "Pre-training under infinite compute"), are much heavier decoupled weight decay, larger models
# *with* that regularisation, and averaging. At lr 1e-3, weight_decay 0.1 shrinks the weights by only
# ~e^-0.1 over a whole 2,000-step run. So:
#   GPU 0  ecoli-v1-wd1       512 shape, weight_decay 1.0, dropout 0.1, 2,000 steps  (weight decay alone)
#   GPU 1  ecoli-v2-wd1-ema   v1 + EMA of the weights (decay 0.997)                   (v2 - v1 = EMA effect)
#   GPU 2  ecoli-v3-wide768   hidden 768 / ffn 1536 / 12 heads, dropout 0.3, wd 1.0, EMA 0.996, 1,400 steps
#   GPU 3  ecoli-v4-wd2-long  512, dropout 0.2, weight_decay 2.0, EMA 0.998, 2,800 steps (heaviest, longest)
# Left out: longer seq_length. Validation windows are seq_length long, so 2,048 only raises the mean
# context of the scored bases from ~512 to ~1,024. The Markov table saturates at k = 7, and the gain
# over it is local (codon-scale) structure, so that should be worth only a few thousandths of a
# bit/base. And at 4,096, 493,568 is not a multiple of the window length, so a different set of bases
# would be scored. Also left out: stride. The model memorises base content, not window alignment.
# EMA is Lightning's EMAWeightAveraging. Validation swaps in the averaged weights, and on_train_end
# copies them into the model before ModelCheckpoint's on_train_end writes last.ckpt (checkpoint
# callbacks run last; every_n_epochs 0 means that is the only save). device: cuda, because the callback
# builds its copy in setup(), before the model is moved to the GPU. The validation curves of EMA runs
# lag the raw weights early in training by design. Compare their late points.
# After training, every last.ckpt is scored again on the held-out split outside Lightning (torch
# kernels, no TE). Each model's number must agree with its last val/bits_per_base. Then an ensemble
# (mean of the models' probabilities) of every subset is scored, which is free and says whether
# ensembling is worth building. Checkpoints are deleted before packing. Expected wall-clock:
# v1 ~265 s, v2 ~270 s, v3 ~300-380 s, v4 ~360 s, ensemble ~20 s. BUDGET_S bounds everything.
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT}
START=$(date +%s)
DEADLINE=$(( START + ${BUDGET_S:-520} ))
V=results/quality/variants
VARIANTS=(ecoli-v1-wd1 ecoli-v2-wd1-ema ecoli-v3-wide768 ecoli-v4-wd2-long)
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
$PY -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
# Decompress and index the genome once, so four processes do not all write the same cache files.
$PY -c "from biomoe.fasta import Genome; Genome(['data/large/ecoli536_NC_008253.fna.gz'])" || exit 3

if [ -z "${SKIP_FIT:-}" ]; then  # SKIP_FIT=1: summarise and pack existing $OUT/<name>/ folders (testing)
  pids=()
  for i in "${!VARIANTS[@]}"; do
    n=${VARIANTS[$i]}
    ( export CUDA_VISIBLE_DEVICES=$i
      t0=$(date +%s)
      timeout $(( DEADLINE - t0 - 45 )) $PY cli.py fit --config "$V/$n.yaml" \
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
from biomoe.data import GenomeDataModule
from biomoe.inference import load_model
from biomoe.losses import LN2, per_position_log_likelihood
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
echo "call-e total $(( $(date +%s) - START )) s" | tee -a "$OUT/summary.txt"
find "$OUT" -name "*.ckpt" -delete
tar czf /tmp/results-e.tgz -C "$OUT" . && for n in "${VARIANTS[@]}"; do rm -rf "${OUT:?}/$n"; done \
  && mv /tmp/results-e.tgz "$OUT/"
ls "$OUT"
