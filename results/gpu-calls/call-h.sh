#!/usr/bin/env bash
# Device call H (nvidia-h200-x4): issue #6, four more E. coli 536 quality variants at once, one per
# GPU, each a plain `python cli.py fit --config results/quality/variants/<name>.yaml` MoE run (same
# split, Markov baseline, CSVLogger, validation every 100 steps, EMA and weights-only last.ckpt as
# call E's v3). Same driver as results/gpu-calls/call-e.sh; only the variants, this header, BUDGET_S
# and the labels of the summary line and the archive differ.
# run(kind=nvidia-h200-x4, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-h.sh
#
# Why these four (results/quality/variants-run/summary.txt). Every 512-hidden recipe bottoms out at
# 1.848-1.852 held-out bits/base (dropout 0.1-0.2, weight decay 0.1-2.0, EMA); more regularisation
# at 512 only moves the minimum later. The one run still improving at its last step was v3 (hidden
# 768, dropout 0.3, wd 1.0, EMA 0.996): 1.8519 at step 1,400, train (dropout on) 1.83. And the
# ensemble of the four call-E models reached 1.827, so capacity plus variance control pays. So this
# call spends a whole 10-minute command per model on larger, strongly regularised models:
#   GPU 0  ecoli-v5-wide768-long  v3 unchanged, 2,600 steps instead of 1,400 (v3's floor)
#   GPU 1  ecoli-v6-wide1024      hidden 1024 / 16 heads (4 kv) / ffn 2048, dropout 0.3, wd 1.0, EMA, 1,600 steps
#   GPU 2  ecoli-v7-wide1024-reg  v6 with dropout 0.4, wd 1.5 (v7 - v6: memorisation or too few updates)
#   GPU 3  ecoli-v8-deep768       v3 with 12 layers instead of 8, 1,700 steps (depth against v6's width)
# Parameters (total / active per token) and FLOPs per token (6*N_active + attention):
#   v5 239 M / 69 M, 454 M; v6 and v7 424 M / 122 M, 781 M; v8 359 M / 104 M, 680 M.
# Throughput: call E measured 600k tokens/s for the 512 shape (214 MFLOP/token) and 420k for v3's 768
# (454 MFLOP/token). The line through those two, time/token = 1.03 us + FLOPs / 335 TFLOP/s, with the
# fixed part scaled by layer count, gives v5 420k (156 ms/step), v6/v7 ~298k (220 ms/step), v8 ~280k
# (234 ms/step). Expected training time: v5 ~406 s, v6/v7 ~352 s, v8 ~398 s; process wall-clock (plus
# ~55-60 s start-up, Markov fit and validation): v5 ~460 s, v6/v7 ~415 s, v8 ~455 s. The 1024 step
# count is chosen so that it still ends in ~490 s if the 1024 shape is no more efficient per FLOP
# than v3's (190 TFLOP/s -> 243k tokens/s). Each config's max_time is 9 min 30 s, the guard for
# running it alone in one 10-minute command; here the fits are killed earlier, at BUDGET_S - 45 s after
# the script's start (~510 s of fit time with BUDGET_S 570), so that the summary, the re-scoring and
# ensembles (~30 s for these sizes) and the packing finish inside the device's 600 s command limit.
# A killed fit leaves no last.ckpt (it is written at train end), so it drops out of the ensembles.
# After training, every last.ckpt is scored again on the held-out split outside Lightning (torch
# kernels, no TE). Each model's number must agree with its last val/bits_per_base. Then an ensemble
# (mean of the models' probabilities) of every subset is scored. Checkpoints are deleted before
# packing. Everything is packed into one tar (the device returns at most 8 files).
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT}
START=$(date +%s)
DEADLINE=$(( START + ${BUDGET_S:-570} ))
V=results/quality/variants
VARIANTS=(ecoli-v5-wide768-long ecoli-v6-wide1024 ecoli-v7-wide1024-reg ecoli-v8-deep768)
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
echo "call-h total $(( $(date +%s) - START )) s" | tee -a "$OUT/summary.txt"
find "$OUT" -name "*.ckpt" -delete
tar czf /tmp/results-h.tgz -C "$OUT" . && for n in "${VARIANTS[@]}"; do rm -rf "${OUT:?}/$n"; done \
  && mv /tmp/results-h.tgz "$OUT/"
ls "$OUT"
