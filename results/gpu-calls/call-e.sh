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
CALL=e BUDGET_S=${BUDGET_S:-520} exec bash results/quality/run_variants.sh ecoli-v1-wd1 ecoli-v2-wd1-ema ecoli-v3-wide768 ecoli-v4-wd2-long
