"""The contenders of the MoE-against-dense study: sizes, variants at equal active parameters, and
the ``cli.py fit`` command line of each (shared by the side-by-side study and the speed bench)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONFIG = "configs/corpus-study.yaml"

SIZES: dict[str, dict[str, int]] = {
    # configs/genome.yaml's network (and configs/pretrain-corpus.yaml's)
    "base": {"hidden_size": 512, "num_heads": 8, "num_kv_heads": 4, "ffn_hidden_size": 1024},
    # about 4x the parameters: twice the width everywhere
    "4x": {"hidden_size": 1024, "num_heads": 16, "num_kv_heads": 8, "ffn_hidden_size": 2048},
}


VARIANTS = ["dense", "moe", "top1", "fine", "fine64", "auxfree", "shared"]
"""The variants of :func:`variant_settings`, in the order tables list them."""


def variant_settings(variant: str, ffn: int) -> dict[str, object]:
    """``model.config`` overrides of a variant, at equal active parameters per token (2 x ffn)."""
    table: dict[str, dict[str, object]] = {
        "moe": {},
        "dense": {"moe_layers": []},  # a dense block's width defaults to ffn * top_k
        "top1": {"top_k": 1, "ffn_hidden_size": 2 * ffn},
        "fine": {"num_experts": 32, "top_k": 8, "ffn_hidden_size": ffn // 4},
        "fine64": {"num_experts": 64, "top_k": 8, "ffn_hidden_size": ffn // 4},
        "auxfree": {"router_bias_update_rate": 0.001, "aux_loss_coef": 0.0},
        "shared": {"top_k": 1, "shared_expert_size": ffn},  # one routed expert beside a shared one
    }
    if variant not in table:
        raise SystemExit(f"biomoe: error: --variants: unknown variant '{variant}' (known: {', '.join(table)})")
    return table[variant]


def contender_args(size: str, variant: str, data: str, steps: int, evaluations: int, run_dir: Path,
                   extra: list[str]) -> list[str]:
    cfg = dict(SIZES[size])
    cfg.update(variant_settings(variant, SIZES[size]["ffn_hidden_size"]))
    args = [sys.executable, "cli.py", "fit", "--config", CONFIG, "--data.fasta", data,
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(max(1, steps // evaluations)),
            "--trainer.default_root_dir", str(run_dir), "--trainer.logger.init_args.save_dir", str(run_dir)]
    for key, value in cfg.items():
        args += [f"--model.config.{key}", json.dumps(value)]
    return args + list(extra)
