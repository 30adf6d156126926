"""Headline figures quoted in the prose of README.md and docs/, each tied to the results file it
comes from: ``python -m bench.docs_tables --check`` (and the CPU test suite) fails when a quote is
gone from its document or disagrees with its file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


class HeadlineSourceError(Exception):
    """A results file a headline reads that is missing or not JSON: one line naming it."""


def read_json(path: str, root: Path = ROOT) -> Any:
    try:
        return json.loads((root / path).read_text())
    except FileNotFoundError:
        raise HeadlineSourceError(f"{path}: no such results file") from None
    except json.JSONDecodeError as err:
        raise HeadlineSourceError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from None


def _markov_gap(genome: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        run = data["genome_recipe"][genome]
        return f"{run['markov6'] - run['kept_checkpoint']['bits_per_base']:.3f}"
    return value


def _torch_over_te_layers(data: Any) -> str:
    import statistics

    medians = {(c["size"], c["variant"], c["kernels"]): statistics.median(r["tokens_per_s"] for r in c["runs"]
                                                                            if "tokens_per_s" in r)
               for c in data["contenders"]}
    ratios = [medians[(s, v, "torch")] / medians[(s, v, "te")] for (s, v, k) in medians
              if k == "te" and (s, v, "torch") in medians and v in ("dense", "moe")]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x"


def _zero_shot_gaps(data: Any) -> str:
    gaps = [g["markov6"] - g["zero_shot_moe"] for g in data["held_out"].values()]
    return f"{min(gaps):.2f}–{max(gaps):.2f}"


@dataclass(frozen=True)
class Headline:
    """A figure quoted in prose: ``quote`` must be in ``document`` and contain what ``value`` reads
    from ``source``."""

    document: str
    quote: str
    source: str
    value: Callable[[Any], str]


def _gemm_ratio_range(impl: str, digits: int) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        ratios = [r[f"{impl}_over_dense"] for r in data["rows"] if f"{impl}_over_dense" in r]
        return f"{min(ratios):.{digits}f}-{max(ratios):.{digits}f}"
    return value


def _gemm_tflops_range(key: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        rates = [r[key] for r in data["rows"] if key in r]
        return f"{min(rates):.0f}-{max(rates):.0f}"
    return value


HEADLINES = (
    Headline("README.md", "reaches **1.775 bits/base**", "results/quality/run-summaries/ecoli-mutation.repeat-mix.json",
             lambda d: f"{d['mixed_bits_per_base']:.3f}"),
    Headline("README.md", "the network alone 1.841", "results/quality/run-summaries/ecoli-mutation.repeat-mix.json",
             lambda d: f"{d['base_bits_per_base']:.3f}"),
    Headline("README.md", "the best Markov model 1.936", "results/quality/markov_ecoli536.json",
             lambda d: f"{min(r['bits_per_base'] for r in d['rows']):.3f}"),
    Headline("README.md", "one H200, 518 s", "results/quality/run-summaries/ecoli-mutation.json",
             lambda d: f"{'H200' if 'H200' in d['hardware'] else d['hardware']}, {d['wall_clock_s']} s"),
    Headline("README.md", "it ends 0.093 (*H. pylori*)", "results/recipes/summary.json",
             _markov_gap("hpylori_sjm180")),
    Headline("README.md", "and 0.087 bits/base (*S. aureus*)", "results/recipes/summary.json",
             _markov_gap("saureus_rf122")),
    Headline("README.md", "(1.15-1.46x faster there)", "results/experts/speed/speed.json", _torch_over_te_layers),
    Headline("README.md", "strain 0.04–0.06 bits/base below", "results/recipes/summary.json", _zero_shot_gaps),
    Headline("docs/benchmarks.md", "2.0-2.5x the dense six", "results/experts/gemms-triton/gemms.json",
             _gemm_ratio_range("triton", 1)),
    Headline("docs/benchmarks.md", "against quack's 1.16-1.45x", "results/experts/gemms/gemms.json",
             _gemm_ratio_range("quack", 2)),
    Headline("docs/benchmarks.md", "quack runs 442-595", "results/experts/gemms/gemms.json",
             _gemm_tflops_range("quack_tflops")),
    Headline("docs/benchmarks.md", "against cuBLAS's 635-694", "results/experts/gemms/gemms.json",
             _gemm_tflops_range("dense_tflops")),
)


def headline_problems(root: Path = ROOT) -> list[str]:
    """One line for every headline whose quote is missing from its document or disagrees with its file."""
    problems = []
    for h in HEADLINES:
        text = (root / h.document).read_text()
        if h.quote not in text:
            problems.append(f"{h.document}: no longer quotes {h.quote!r} (update HEADLINES)")
            continue
        value = h.value(read_json(h.source, root))
        if value not in h.quote:
            problems.append(f"{h.document}: {h.quote!r} but {h.source} gives {value}")
    return problems
