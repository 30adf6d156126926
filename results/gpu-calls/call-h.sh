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
CALL=h BUDGET_S=${BUDGET_S:-570} exec bash results/quality/run_variants.sh ecoli-v5-wide768-long ecoli-v6-wide1024 ecoli-v7-wide1024-reg ecoli-v8-deep768
