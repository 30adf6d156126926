"""Benchmark shapes: the same numbers build the HF baseline and biomoe, so they are comparable."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchShape:
    name: str
    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    experts: int
    top_k: int
    seq: int
    micro_batch: int
    vocab: int = 64  # nucleotide vocabulary padded to a multiple of 64
    # Parameters per token when not every layer is a uniform MoE layer (a config with dense blocks,
    # counted by ModelConfig.active_params_per_token); None counts every layer as MoE.
    active_params_override: int | None = None

    def with_seq(self, seq: int, micro_batch: int = 1) -> "BenchShape":
        return dataclasses.replace(self, seq=seq, micro_batch=micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.seq * self.micro_batch

    @property
    def case(self) -> str:
        """``name@tokens_per_step``: how rows, ``--shapes`` and ``--rows`` name this shape."""
        return f"{self.name}@{self.tokens_per_step}"

    def active_params(self) -> int:
        """Parameters used per token (embedding lookup excluded; router and LM head included)."""
        if self.active_params_override is not None:
            return self.active_params_override
        head_dim = self.hidden // self.heads
        attn = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        moe = self.top_k * 3 * self.hidden * self.ffn + self.hidden * self.experts
        return self.layers * (attn + moe) + self.hidden * self.vocab

    def flops_per_step(self) -> float:
        """6·N_active·tokens (fwd+bwd matmuls) + 6·L·hidden·T·tokens (causal attention, fwd+bwd)."""
        tokens = self.tokens_per_step
        return 6.0 * self.active_params() * tokens + 6.0 * self.layers * self.hidden * self.seq * tokens

    FLOP_FORMULA = ("FLOPs/step = 6·N_active·tokens + 6·layers·hidden·seq·tokens "
                    "(matmuls fwd+bwd; causal attention scores and values fwd+bwd)")


SHAPES = {
    "mixtral-2layer": BenchShape("mixtral-2layer", hidden=4096, ffn=14336, layers=2, heads=32,
                                 kv_heads=8, experts=8, top_k=2, seq=4096, micro_batch=1),
    "dna-small": BenchShape("dna-small", hidden=1024, ffn=2816, layers=8, heads=16, kv_heads=4,
                            experts=8, top_k=2, seq=8192, micro_batch=2),
    "genome": BenchShape("genome", hidden=512, ffn=1024, layers=8, heads=8, kv_heads=4, experts=8,
                         top_k=2, seq=1024, micro_batch=64),
    "tiny": BenchShape("tiny", hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, experts=4,
                       top_k=2, seq=128, micro_batch=2),
}


DEFAULT_CASES = ("genome@65536", "dna-small@16384", "mixtral-2layer@4096", "mixtral-2layer@16384")
"""The product sweep: the network of configs/genome.yaml as that recipe trains it (seq 1024 x
micro-batch 64), dna-small as configs/dna-small.yaml trains it (seq 8192 x micro-batch 2), and
mixtral-2layer at micro-batch 1 and 4 (seq 4096)."""

SHAPE_RECIPES = {"genome": "genome.yaml", "dna-small": "dna-small.yaml"}
"""The shipped config each shape's ``cli.py fit`` rows start from (its trainer, precision,
callbacks, optimizer and data settings; the shape's network sizes are given on the command line);
shapes not named here use configs/dna-small.yaml."""
QUICK_CASES = ("mixtral-2layer@4096",)


def parse_case(text: str) -> BenchShape:
    """``name`` (the shape's own tokens per step) or ``name@tokens``: the sequence length stays the
    shape's, the micro-batch becomes ``tokens / seq``. Raises ValueError with a one-line reason."""
    name, _, tokens = text.strip().partition("@")
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; choose one of {', '.join(SHAPES)}")
    shape = SHAPES[name]
    if not tokens:
        return shape
    if not tokens.isdigit() or int(tokens) <= 0 or int(tokens) % shape.seq:
        raise ValueError(f"{text!r}: tokens per step must be a positive multiple of the sequence length "
                         f"{shape.seq} of {name}")
    return shape.with_seq(shape.seq, int(tokens) // shape.seq)
