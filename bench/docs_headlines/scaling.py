"""docs/scaling.md's headline figures: the points of the scaling reports (``python -m bench.scaling
report``) and the per-run point files beside them. The tables there are rendered by bench.docs_tables."""

from __future__ import annotations

from typing import Any, Callable

from bench.docs_headlines.core import Headline, kilo, percent, span

DOC = "docs/scaling.md"
RESULTS = "results/scaling/"
OVERHEAD = RESULTS + "mixtral-1gpu-strategy-overhead/"
WARMUP = RESULTS + "mixtral-2gpu-config-warmup/scaling.json"
WITHOUT_FSDP = OVERHEAD + "without-fsdp-at-one-gpu/scaling.json"
FOUR_GPUS = RESULTS + "mixtral-4gpu/scaling.json"
DIVERGENCE = RESULTS + "mixtral-1gpu-fp8-block-divergence/"
PROFILED = "39.1k and 36.8k at 1x1 against 54.3k and 60.4k single-device"
BASELINE_RERUNS = "measured 41.3k (with three other runs on the host), 35.4k (alone) and 37.2k"


def _scaling_field(data: Any, layers: int, precision: str, layout: str, key: str) -> float:
    """One field of the point of a scaling report."""
    return next(r[key] for r in data["results"]
                if (r["layers"], r["precision"], r["layout"]) == (layers, precision, layout))


def _scaling_point(data: Any, layers: int, precision: str, layout: str) -> float:
    return _scaling_field(data, layers, precision, layout, "tokens_per_s_per_gpu")


def _two_layer_bf16(layout: str) -> Callable[[Any], float]:
    return lambda data: _scaling_point(data, 2, "bf16", layout)


ONE_BY_ONE, SINGLE, EP2 = _two_layer_bf16("dp1xep1"), _two_layer_bf16("single-device"), _two_layer_bf16("dp1xep2")
"""The 2-layer bf16 points the text compares: the strategy at 1x1, no strategy, and EP=2."""


def _point_file(template: str) -> Callable[[Any], str]:
    """The throughput of a single point file (one run), placed in ``template`` at ``{}``."""
    return lambda data: template.format(kilo(data["tokens_per_s_per_gpu"]))


def _last_loss(template: str) -> Callable[[Any], str]:
    return lambda data: template.format(f"{data['last_loss']:.2f}")


def _ep2_share(data: Any) -> str:
    return percent(EP2(data) / SINGLE(data))


def _strategy_at_one_by_one(data: Any) -> str:
    return f"{kilo(ONE_BY_ONE(data))} tokens/s under `ExpertParallelStrategy` at 1x1 and {kilo(SINGLE(data))}"


def _single_over_strategy(data: Any) -> str:
    return f"{SINGLE(data) / ONE_BY_ONE(data):.2f}×"


def _one_by_one_vs_single(data: Any) -> str:
    return f"{kilo(ONE_BY_ONE(data))} vs {kilo(SINGLE(data))}"


def _without_fsdp(data: Any) -> str:
    return (f"{kilo(ONE_BY_ONE(data))} tokens/s at 1x1 against {kilo(SINGLE(data))} single-device "
            f"({percent(ONE_BY_ONE(data) / SINGLE(data))})")


def _same_peak(data: Any) -> str:
    """The peak memory of every point, one figure when they agree to the quoted digit."""
    low, high = (f"{extreme(r['peak_mem_gb'] for r in data['results']):.1f}" for extreme in (min, max))
    return low if low == high else f"{low}–{high}"


def _wall_times(data: Any) -> str:
    return (f"{_scaling_field(data, 2, 'bf16', 'dp1xep1', 'wall_s'):.0f} s against "
            f"{_scaling_field(data, 2, 'bf16', 'single-device', 'wall_s'):.0f} s")


def _bare_loop_auto_bf16(data: Any) -> str:
    return kilo(next(r["tokens_per_s"] for r in data["results"]
                      if (r["variant"], r["shape"]) == ("biomoe-auto-bf16", "mixtral-2layer")))


def _four_gpu_efficiency(data: Any) -> str:
    """The range of the 4-GPU points' throughput against their 1-GPU point (points without one left out)."""
    shares = [r["efficiency"] * 100 for r in data["results"] if r["gpus"] == 4 and r["efficiency"] is not None]
    return span(shares, "{:.0f}") + " %"


def _full_depth(key: str) -> Callable[[Any], float]:
    """A field of the full-depth (32-layer) point, fp8-block on 4 GPUs at EP=4."""
    return lambda data: _scaling_field(data, 32, "fp8-block", "dp1xep4", key)


def _full_depth_run(data: Any) -> str:
    first, last = _full_depth("first_loss")(data), _full_depth("last_loss")(data)
    return f"{first:.3f} → {last:.3f}, **{_scaling_point(data, 32, 'fp8-block', 'dp1xep4'):,.0f} tokens/s per GPU**"


def _fp8_block_warmup_loss(data: Any) -> str:
    last, first = (_scaling_field(data, 2, "fp8-block", "dp1xep1", k) for k in ("last_loss", "first_loss"))
    return f"at {last:.3f} from {first:.3f}"


def _eight_layer_peak(precision: str) -> Callable[[Any], float]:
    return lambda data: _scaling_field(data, 8, precision, "dp1xep1", "peak_mem_gb")


def _eight_layer_peaks(data: Any) -> str:
    return f"{_eight_layer_peak('bf16')(data):.1f} and {_eight_layer_peak('fp8-block')(data):.1f} GB"


HEADLINES = (
    Headline(DOC, "EP=2 keeps 81 % per GPU", WARMUP, _ep2_share),
    Headline(DOC, "35.6k tokens/s under `ExpertParallelStrategy` at 1x1 and 56.3k", OVERHEAD + "scaling.json",
             _strategy_at_one_by_one),
    Headline(DOC, "(1.58×, `points/`", OVERHEAD + "scaling.json", _single_over_strategy),
    Headline(DOC, PROFILED, OVERHEAD + "profiled-cpu-time/mixtral-8x7b-ep8-2L-bf16-dp1xep1.json",
             _point_file("{} and")),
    Headline(DOC, PROFILED, OVERHEAD + "profiled-cuda-time/mixtral-8x7b-ep8-2L-bf16-dp1xep1.json",
             _point_file("and {} at 1x1")),
    Headline(DOC, PROFILED, OVERHEAD + "profiled-cpu-time/mixtral-8x7b-ep8-2L-bf16-single-device.json",
             _point_file("against {} and")),
    Headline(DOC, PROFILED, OVERHEAD + "profiled-cuda-time/mixtral-8x7b-ep8-2L-bf16-single-device.json",
             _point_file("and {} single-device")),
    Headline(DOC, "measured with it: 36.0k vs 53.1k", WARMUP, _one_by_one_vs_single),
    Headline(DOC, "**47.8k tokens/s at 1x1 against 52.1k single-device (92 %)**", WITHOUT_FSDP, _without_fsdp),
    Headline(DOC, "the same 49.3 GB peak", WITHOUT_FSDP, _same_peak),
    Headline(DOC, "(24 s against 55 s of wall time", WITHOUT_FSDP, _wall_times),
    Headline(DOC, "74.2k tokens/s for `biomoe-auto-bf16`", "results/bench/bare-loop/bench.json", _bare_loop_auto_bf16),
    Headline(DOC, "within 96–117 % of its 1-GPU point", FOUR_GPUS, _four_gpu_efficiency),
    Headline(DOC, BASELINE_RERUNS, FOUR_GPUS, lambda d: f"measured {kilo(ONE_BY_ONE(d))}"),
    Headline(DOC, BASELINE_RERUNS, RESULTS + "mixtral-4gpu/baseline-reruns/alone/mixtral-8x7b-ep8-2L-bf16-dp1xep1.json",
             _point_file("{} (alone)")),
    Headline(DOC, BASELINE_RERUNS,
             RESULTS + "mixtral-4gpu/baseline-reruns/simple-profiler/mixtral-8x7b-ep8-2L-bf16-dp1xep1.json",
             _point_file("and {}")),
    Headline(DOC, "loss\n  4.514 → 1.502, **2,343 tokens/s per GPU**", FOUR_GPUS, _full_depth_run),
    Headline(DOC, "that is 185 TFLOP/s per GPU", FOUR_GPUS,
             lambda d: f"{_full_depth('tflops_per_gpu')(d):.0f} TFLOP/s"),
    Headline(DOC, "23 % of the 790 TFLOP/s bf16 reference", FOUR_GPUS, lambda d: percent(_full_depth("mfu")(d))),
    Headline(DOC, "ending at 1.67 and 1.68 after 30 steps",
             DIVERGENCE + "dispatch-backend-torch/mixtral-8x7b-ep8-2L-fp8-block-dp1xep1.json",
             _last_loss("at {} and")),
    Headline(DOC, "ending at 1.67 and 1.68 after 30 steps",
             DIVERGENCE + "router-backend-torch/mixtral-8x7b-ep8-2L-fp8-block-dp1xep1.json",
             _last_loss("and {} after")),
    Headline(DOC, "at 2.228 from 4.548", WARMUP, _fp8_block_warmup_loss),
    Headline(DOC, "peaked at 106.5 and 128.5 GB (table)", FOUR_GPUS, _eight_layer_peaks),
    Headline(DOC, "8 layers already\npeaked at 128.5 GB", FOUR_GPUS,
             lambda d: f"{_eight_layer_peak('fp8-block')(d):.1f} GB"),
)
