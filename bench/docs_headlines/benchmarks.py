"""docs/benchmarks.md's headline figures: the expert GEMMs, the fit's memory and the moment dtypes."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_headlines.core import Headline, span

GEMMS = "results/experts/gemms/gemms.json"


def _gemm_ratio_range(impl: str, digits: int) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        key = f"{impl}_over_dense"
        return span((r[key] for r in data["rows"] if key in r), f"{{:.{digits}f}}", "-")
    return value


def _gemm_tflops_range(key: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return span((r[key] for r in data["rows"] if key in r), "{:.0f}", "-")
    return value


def _peak_memory(data: Any, contender: str, tokens_per_step: int) -> float:
    return next(r["peak_mem_gb"] for r in data["records"]
                if (r["contender"], r["tokens_per_step"], r["precision"], r["status"])
                == (contender, tokens_per_step, "bf16", "ok"))


def _fit_memory_over_hf(data: Any) -> str:
    """The shipped fit (the step without the data path) against HF's peak memory, at both step sizes."""
    ratios = [_peak_memory(data, "biomoe-cli-repeated", n) / _peak_memory(data, "hf-bf16-fused", n)
              for n in (16384, 4096)]
    return span(ratios, "{:.1f}") + "×"


HEADLINES = (
    Headline("docs/benchmarks.md", "2.0-2.5x the dense six", "results/experts/gemms-triton/gemms.json",
             _gemm_ratio_range("triton", 1)),
    Headline("docs/benchmarks.md", "against quack's 1.16-1.45x", GEMMS, _gemm_ratio_range("quack", 2)),
    Headline("docs/benchmarks.md", "quack runs 442-595", GEMMS, _gemm_tflops_range("quack_tflops")),
    Headline("docs/benchmarks.md", "against cuBLAS's 635-694", GEMMS, _gemm_tflops_range("dense_tflops")),
    Headline("docs/benchmarks.md", "+0.009 bits/base after 400 steps", "results/quality/moment-dtypes.json",
             lambda d: f"+{d['runs']['bf16']['vs_fp32_at_400']:.3f}"),
    Headline("docs/benchmarks.md", "at 1.8–2.0× HF's memory", "results/bench/sweep/mixtral.json", _fit_memory_over_hf),
)
