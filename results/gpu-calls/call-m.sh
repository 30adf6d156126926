#!/usr/bin/env bash
# Device call M (nvidia-h200-x2), prepared in the fourth session for the next one, NOT run yet:
# issue #6, the two best networks so far, each mixed with the repeat expert (biomoe/repeats.py).
# run(kind=nvidia-h200-x2, carry=[".te","data/large"]):  source .te/setup.sh && bash results/gpu-calls/call-m.sh
#   GPU 0  ecoli-v11-wd1-ema-mut10-long  (= configs/ecoli-mutation.yaml; call K: 1.8411 alone, 469 s)
#   GPU 1  ecoli-v9-wide768-mut5         (call J: best 1.8448 at 2,000 of 2,600 steps, 471 s)
# Both fits get the RepeatMixture callback (val/repeat_mix_bits_per_base beside val/bits_per_base at
# every validation) and validate every 300 steps instead of 100 (12 instead of 36 validations, so
# the extra forward per validation batch costs ~12 s, not ~36 s). Then run_variants.sh re-scores each
# last.ckpt, scores the ensemble, and (REPEAT_MIX=1) runs `cli.py repeat-mix --ckpt` on each as a
# cross-check of the callback's last value. Everything comes back in one tar per the driver.
# If a network alone is at ~1.84 and the repeat positions (4.3 % of held-out bases) cost it ~1.9
# bits/base as they cost the Markov model, the mixed number should land near 1.78-1.80.
CALL=m BUDGET_S=${BUDGET_S:-580} REPEAT_MIX=1 \
  FIT_ARGS="--trainer.callbacks+=biomoe.repeat_metric.RepeatMixture --trainer.val_check_interval 300" \
  exec bash results/quality/run_variants.sh ecoli-v11-wd1-ema-mut10-long ecoli-v9-wide768-mut5
