"""docs/gpus.md's headline figures: the compiled AdamW, the moments' dtype and FP8 against bf16."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_headlines.core import Headline, percent, span

DOC = "docs/gpus.md"
MOMENTS = "results/quality/moment-dtypes.json"
SWEEP_SMALL = "results/bench/sweep/small-shapes.json"
SWEEP_MIXTRAL = "results/bench/sweep/mixtral.json"


def _rate(data: Any, contender: str, precision: str, tokens_per_step: int | None = None,
          shape: str | None = None) -> float:
    """The measured tokens/s of one row of a bench report (the one with these keys)."""
    return next(r["tokens_per_s"] for r in data["records"]
                if r["contender"] == contender and r["precision"] == precision and r["status"] == "ok"
                and tokens_per_step in (None, r["tokens_per_step"]) and shape in (None, r["shape"]))


def _fp8_over_bf16(data: Any, contender: str, shape: str, tokens_per_step: int) -> float:
    """The fastest FP8 recipe's tokens/s over bf16's, for one contender on one shape."""
    fp8 = max(r["tokens_per_s"] for r in data["records"]
              if (r["contender"], r["shape"], r["tokens_per_step"], r["status"]) == (contender, shape,
                                                                                       tokens_per_step, "ok")
              and r["precision"].startswith("fp8"))
    return fp8 / _rate(data, contender, "bf16", tokens_per_step, shape)


def _compiled_over_te(data: Any) -> str:
    """``backend: compiled`` against TE's FusedAdam (the default), in the fit of one report."""
    return percent(_rate(data, "biomoe-cli-compiled-adamw", "bf16") / _rate(data, "biomoe-cli-repeated", "bf16") - 1)


def _fp8_at_16k(data: Any) -> str:
    fit, loop = (_fp8_over_bf16(data, c, "mixtral-2layer", 16384) for c in ("biomoe-cli", "biomoe-loop"))
    return f"{fit:.2f}× its bf16 speed, the bare loop {loop:.2f}×"


def _fp8_slower_at_4k(data: Any) -> str:
    ratio = _fp8_over_bf16(data, "biomoe-cli", "mixtral-2layer", 4096)
    return f"4k tokens/step it is {'slower' if ratio < 1 else 'faster'}"


def _fit_fp8_range_small_shapes(data: Any) -> str:
    shapes = dict.fromkeys((r["shape"], r["tokens_per_step"]) for r in data["records"])
    return span((_fp8_over_bf16(data, "biomoe-cli", s, n) for s, n in shapes), "{:.2f}") + "× of bf16"


def _moments_vs_fp32(dtype: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return f"+{data['runs'][dtype]['vs_fp32_at_400']:.3f}"
    return value


HEADLINES = (
    Headline(DOC, "`cli.py fit` ran 9 % faster at", "results/bench/compiled-adamw/mixtral-16k.json", _compiled_over_te),
    Headline(DOC, "29 % faster at 4k than with TE's kernel", "results/bench/compiled-adamw/mixtral-4k.json",
             _compiled_over_te),
    Headline(DOC, "(+0.009 bits/base after 400 steps of `configs/dna-small.yaml`", MOMENTS, _moments_vs_fp32("bf16")),
    Headline(DOC, "the first moment only: +0.002", MOMENTS, _moments_vs_fp32("bf16-first")),
    Headline(DOC, "1.31× its bf16 speed, the bare loop 1.42×", SWEEP_MIXTRAL, _fp8_at_16k),
    Headline(DOC, "mixtral-2layer with 4k tokens/step it is slower", SWEEP_MIXTRAL, _fp8_slower_at_4k),
    Headline(DOC, "0.66–0.92× of bf16", SWEEP_SMALL, _fit_fp8_range_small_shapes),
)
