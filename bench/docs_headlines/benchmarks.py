"""docs/benchmarks.md's headline figures: the prose around its rendered tables (the sweeps of
``python -m bench``, the recipes runs, the bare loop, the inference commands, the expert kernels, the
fit's memory and the moment dtypes), each read from the results file the sentence names."""

from __future__ import annotations

import statistics
from typing import Any, Callable

from bench.docs_headlines.core import Headline, kilo, percent, span
from bench.docs_headlines.profiles import expert_gemm_tflops, gpu_ms_per_step, operator_ms_per_step

DOC = "docs/benchmarks.md"
BENCH = "results/bench/"
SINGLE = BENCH + "bench.json"
SWEEP_SMALL = BENCH + "sweep/small-shapes.json"
SWEEP_MIXTRAL = BENCH + "sweep/mixtral.json"
SWEEP_INFERENCE = BENCH + "sweep/inference-genome.json"
RECIPES_A = BENCH + "recipes-bf16-true/bench.json"
RECIPES_B = BENCH + "recipes-graphs/bench.json"
RECIPES_C = BENCH + "recipes-all-shapes/bench.json"
OPTIMIZER_VARIANTS = BENCH + "optimizer-variants/bench.json"
CLI_COMPILE = BENCH + "cli-compile/bench.json"
BARE_LOOP = BENCH + "bare-loop/bench.json"
BARE_LOOP_PROFILE = BENCH + "bare-loop/profile-mixtral-2layer.txt"
BARE_COMPILE = BENCH + "compile/bench.json"
LAYER_ABLATION = BENCH + "layer-ablation/bench.json"
CPU_FRESH = BENCH + "inference-cpu-fresh/inference.json"
USE_COMMANDS = BENCH + "inference-gpu/score-embed.json"
GEMMS = "results/experts/gemms/gemms.json"
SPEED = "results/experts/speed/speed.json"
SPEED_QUACK = "results/experts/speed-quack/speed.json"
STUDY = "results/experts/study/summary.json"

WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
"""Counts of runs as the text spells them."""


def _range(values: list[float], fmt: str) -> str:
    """``low–high`` with ``fmt``, or one value where both ends read the same."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}–{high}"


# --- bench reports (``python -m bench``): one record per shape, contender and precision ---

def _record(data: Any, shape: str, tokens: int, contender: str, precision: str = "bf16") -> dict[str, Any]:
    return next(r for r in data["records"]
                if (r["shape"], r["tokens_per_step"], r["contender"], r["precision"], r["status"])
                == (shape, tokens, contender, precision, "ok"))


def _rate(data: Any, shape: str, tokens: int, contender: str, precision: str = "bf16") -> float:
    return _record(data, shape, tokens, contender, precision)["tokens_per_s"]


SMALL_SHAPES = (("genome", 65536), ("dna-small", 16384))
MIXTRAL_SHAPES = (("mixtral-2layer", 4096), ("mixtral-2layer", 16384))
RECIPE_SHAPES = SMALL_SHAPES + MIXTRAL_SHAPES
"""The shapes in the order the text lists them."""


def _peak_memory(data: Any, contender: str, tokens_per_step: int) -> float:
    return _record(data, "mixtral-2layer", tokens_per_step, contender)["peak_mem_gb"]


def _fit_memory_over_hf(data: Any) -> str:
    """The shipped fit (the step without the data path) against HF's peak memory, at both step sizes."""
    ratios = [_peak_memory(data, "biomoe-cli-repeated", n) / _peak_memory(data, "hf-bf16-fused", n)
              for n in (16384, 4096)]
    return span(ratios, "{:.1f}") + "×"


def _sweep_genome_fit(data: Any) -> str:
    record = _record(data, "genome", 65536, "biomoe-cli")
    low, high = (x / 1e3 for x in record["tokens_per_s_range"])
    return f"{kilo(record['tokens_per_s'])} here (range {low:,.1f}–{high:,.1f}k)"


def _wall_seconds(data: Any) -> str:
    """A run's wall time: a training sweep keeps it in its settings, other reports at the top."""
    seconds = data.get("settings", {}).get("wall_s", data.get("wall_s"))
    return f"{seconds:.0f} s"


def _repeats(data: Any) -> str:
    return WORDS[data["settings"]["repeats"]]


def _against(shape: str, tokens: int, mine: str, theirs: str, digits: int = 1) -> Callable[[Any], str]:
    """``92.0k against 85.7k``: two rows of one shape."""
    def value(data: Any) -> str:
        return (f"{kilo(_rate(data, shape, tokens, mine), digits)} against "
                f"{kilo(_rate(data, shape, tokens, theirs), digits)}")
    return value


def _change(shape: str, tokens: int, mine: str, theirs: str, mine_precision: str = "bf16") -> Callable[[Any], float]:
    """How much faster (positive) or slower ``mine`` is than ``theirs``, as a fraction."""
    def value(data: Any) -> float:
        return _rate(data, shape, tokens, mine, mine_precision) / _rate(data, shape, tokens, theirs) - 1
    return value


def _compile_gains(data: Any) -> str:
    gains = [percent(_change("mixtral-2layer", n, "biomoe-cli-compile", "biomoe-cli")(data)) for n in (16384, 4096)]
    return f"gains {gains[0]} at 16,384 and {gains[1]} at 4,096 tokens"


def _compile_pair(data: Any, tokens: int) -> tuple[str, str]:
    """Compiled blocks against the fit at mixtral-2layer: ``92.0k against 85.7k`` and ``(+7 %)``."""
    gain = percent(_change("mixtral-2layer", tokens, "biomoe-cli-compile", "biomoe-cli")(data))
    return _against("mixtral-2layer", tokens, "biomoe-cli-compile", "biomoe-cli")(data), f"(+{gain})"


def _compile_at_16k(data: Any) -> str:
    pair, gain = _compile_pair(data, 16384)
    return f"{pair} tokens/s {gain}"


def _compile_at_4k_and_dna_small(data: Any) -> str:
    pair, gain = _compile_pair(data, 4096)
    return f"{pair} {gain} at 4,096, but " + _against("dna-small", 16384, "biomoe-cli-compile", "biomoe-cli")(data)


def _compile_loss_on_dna_small(data: Any) -> str:
    return percent(-_change("dna-small", 16384, "biomoe-cli-compile", "biomoe-cli")(data))


def _compile_after_fix(data: Any) -> str:
    return (f"{_compile_loss_on_dna_small(data)} after that fix, "
            + _against("dna-small", 16384, "biomoe-cli-compile", "biomoe-cli")(data))


def _best_fp8(data: Any, shape: str, tokens: int, contender: str) -> dict[str, Any]:
    return max((r for r in data["records"] if (r["shape"], r["tokens_per_step"], r["contender"], r["status"])
                == (shape, tokens, contender, "ok") and r["precision"].startswith("fp8")),
               key=lambda r: r["tokens_per_s"])


def _fit_fp8_gain(data: Any) -> str:
    fp8 = _best_fp8(data, "mixtral-2layer", 16384, "biomoe-cli")["tokens_per_s"]
    return percent(fp8 / _rate(data, "mixtral-2layer", 16384, "biomoe-cli") - 1)


def _bare_loop_ratio(data: Any) -> str:
    return f"{_record(data, 'mixtral-2layer', 16384, 'biomoe-loop')['ratio_vs_hf_bf16_fused']:.2f}×"


def _moment_dtype_rates(data: Any) -> str:
    pairs = [_against("mixtral-2layer", n, "biomoe-cli-bf16moments", "biomoe-cli")(data) for n in (16384, 4096)]
    return f"{pairs[0]} at 16,384; {pairs[1]} at 4,096"


def _torch_master_rates(data: Any) -> str:
    rates = [kilo(_rate(data, "mixtral-2layer", n, "biomoe-cli-torchmaster")) for n in (16384, 4096)]
    return f"({rates[0]} and {rates[1]})"


def _fit_with_ratio(data: Any, shape: str, tokens: int) -> str:
    record = _record(data, shape, tokens, "biomoe-cli")
    return f"{kilo(record['tokens_per_s'])} ({record['ratio_vs_hf_bf16_fused']:.2f}×)"


def _run_a(data: Any) -> str:
    return (f"{_fit_with_ratio(data, 'genome', 65536)} on the genome shape and "
            f"{_fit_with_ratio(data, 'dna-small', 16384)} on dna-small")


def _run_b(data: Any) -> str:
    return f"{_fit_with_ratio(data, 'genome', 65536)} and {_fit_with_ratio(data, 'dna-small', 16384)}"


def _data_path_cost(data: Any) -> str:
    """The largest slowdown of the real loader against the repeated batch, over the recipes' shapes."""
    return percent(max(_change(s, n, "biomoe-cli-repeated", "biomoe-cli")(data) for s, n in RECIPE_SHAPES))


def _loader_and_repeated(data: Any) -> str:
    return ", ".join(f"{kilo(_rate(data, s, n, 'biomoe-cli'))} / {kilo(_rate(data, s, n, 'biomoe-cli-repeated'))}"
                     for s, n in RECIPE_SHAPES)


def _fit_over_loop(data: Any, contender: str = "biomoe-cli") -> list[str]:
    return [percent(_rate(data, s, n, contender) / _rate(data, s, n, "biomoe-loop")) for s, n in RECIPE_SHAPES
            if any((r["shape"], r["tokens_per_step"]) == (s, n) for r in data["records"])]


def _recipes_fit_over_loop(data: Any) -> str:
    genome, dna_small, short, long = _fit_over_loop(data)
    return f"{genome} on the genome shape, {dna_small} on dna-small, {short} and {long}"


def _kernels(data: Any, shape: str, tokens: int, contender: str) -> str:
    return f"{_record(data, shape, tokens, contender)['kernels_per_step']:,}"


def _fit_and_loop_kernels(data: Any) -> str:
    pairs = [(_kernels(data, s, n, "biomoe-cli"), _kernels(data, s, n, "biomoe-loop"))
             for s, n in (("genome", 65536), ("dna-small", 16384), ("mixtral-2layer", 4096))]
    return (f"({pairs[0][0]} against {pairs[0][1]} on the genome shape, {pairs[1][0]} / {pairs[1][1]} on "
            f"dna-small, {pairs[2][0]} / {pairs[2][1]} on mixtral-2layer")


def _bf16_true(data: Any) -> str:
    return _against("genome", 65536, "biomoe-cli-bf16-true", "biomoe-cli", digits=0)(data)


def _graphs_torch_kernels(data: Any) -> str:
    return (f"(kernels per step {_kernels(data, 'dna-small', 16384, 'biomoe-cli')} → "
            f"{_kernels(data, 'dna-small', 16384, 'biomoe-cli-graphs-torch')})")


def _graphs_torch_rates(data: Any) -> str:
    return (f"({kilo(_rate(data, 'dna-small', 16384, 'biomoe-cli-graphs-torch'))} on dna-small, "
            + _against("genome", 65536, "biomoe-cli-graphs-torch", "biomoe-cli")(data) + " on the genome shape)")


def _hf_host_time(data: Any) -> str:
    record = _record(data, "mixtral-2layer", 16384, "hf-bf16-fused")
    return f"({record['kernels_per_step']:,} kernels in {record['host_ms']:.0f} ms"


def _loop_host_and_step(data: Any) -> str:
    loops = [r for r in data["records"]
             if (r["contender"], r["precision"], r["status"]) == ("biomoe-loop", "bf16", "ok")]
    return (f"{_range([r['host_ms'] for r in loops], '{:.0f}')} ms for "
            f"{_range([r['step_ms'] for r in loops], '{:.0f}')} ms steps")


def _graphs(data: Any) -> list[dict[str, Any]]:
    return [r for r in data["records"] if (r["contender"], r["status"]) == ("biomoe-loop-graph", "ok")]


def _graph_host(data: Any) -> str:
    return _range([r["host_ms"] for r in _graphs(data)], "{:.1f}") + " ms"


def _graph_step(data: Any) -> str:
    return f"({_range([r['step_ms'] for r in _graphs(data)], '{:.0f}')} ms on the small shapes)"


def _graph_over_loop(data: Any) -> str:
    ratios = [r["tokens_per_s"] / _rate(data, r["shape"], r["tokens_per_step"], "biomoe-loop") for r in _graphs(data)]
    return _range(ratios, "{:.2f}") + "×"


def _nomaster_over_loop(data: Any) -> str:
    short, long = _fit_over_loop(data, "biomoe-cli-nomaster")
    return f"the fit is {short} and {long} of the loop"


def _master_over_loop(data: Any) -> str:
    short, long = _fit_over_loop(data)
    return f"them {short} and {long}"


def _fp8_over_bf16(data: Any) -> str:
    fit, loop = (_best_fp8(data, "mixtral-2layer", 16384, c)["tokens_per_s"] / _rate(data, "mixtral-2layer", 16384, c)
                 for c in ("biomoe-cli", "biomoe-loop"))
    return f"(fit {fit:.2f}× its bf16, loop {loop:.2f}×)"


# --- inference reports (``python -m bench --inference``): one record per task and contender ---

def _inference_record(data: Any, task: str, contender: str) -> dict[str, Any]:
    return next(r for r in data["records"] if (r["task"], r["contender"], r["status"]) == (task, contender, "ok"))


def _cpu_scoring(data: Any) -> str:
    mine, hf = (_inference_record(data, "score-fasta", c) for c in ("biomoe", "hf"))
    warm = [statistics.median(run["seconds"] for run in r["runs"]) for r in (mine, hf)]
    embed = _inference_record(data, "embed", "biomoe")["ratio_vs_hf"]
    return (f"`score-fasta` {mine['cold_seconds']:.2f} s cold, {warm[0]:.2f} s warm against HF's "
            f"{hf['cold_seconds']:.2f} s and {warm[1]:.2f} s ({mine['ratio_vs_hf']:.2f}×), `embed` {embed:.2f}×")


def _cpu_variants_and_generation(data: Any) -> str:
    variants, many, one = (_inference_record(data, t, "biomoe")["ratio_vs_hf"]
                           for t in ("score-variants", "generate-8", "generate-1"))
    return f"`score-variants` {variants:.2f}×, `generate` {many:.2f}× (8 samples) and {one:.2f}× (1)"


def _log_likelihood_spread(data: Any) -> str:
    """The largest difference between the contenders' log-likelihoods of the genome, per base."""
    values = [r["details"]["log_likelihood"] for r in data["records"] if r["task"] == "score-fasta"]
    return f"{(max(values) - min(values)) / data['genome']['bases']:.0e}".replace("e-0", "e-")


# --- the bare loop's reports (before the product benchmark): one result per shape and variant ---

def _bare(data: Any, variant: str, shape: str = "mixtral-2layer") -> dict[str, Any]:
    return next(r for r in data["results"] if (r["shape"], r["variant"], r["status"]) == (shape, variant, "ok"))


def _first_losses(data: Any) -> str:
    hf, mine = (_bare(data, v)["losses"][0] for v in ("hf-default", "biomoe-grouped-bf16"))
    return f"({hf:.3f} vs {mine:.3f};"


def _longest_sequence_point(data: Any) -> str:
    point = next(r for r in data["seq_sweep"] if (r["variant"], r["seq"]) == ("biomoe-ac", 262144))
    return f"{point['peak_mem_gb']:.1f} GB, {kilo(point['tokens_per_s'])} tokens/s"


def _te_layers_against_torch(data: Any) -> str:
    te, torch = (_bare(data, v)["tokens_per_s"] for v in ("biomoe-grouped-bf16", "biomoe-grouped-bf16[torch layers]"))
    return f"({kilo(te)} tokens/s vs {kilo(torch)}"


def _te_fp8_against_grouped(data: Any) -> str:
    grouped = _bare(data, "biomoe-grouped-bf16")["tokens_per_s"]
    changes = [_bare(data, f"biomoe-{backend}-{recipe}")["tokens_per_s"] / grouped - 1
               for backend in ("te", "te_fused") for recipe in ("fp8-current", "fp8-block", "fp8-delayed")]
    return f"from {percent(-min(changes))} slower to {percent(max(changes))} faster"


def _half_hf_step(data: Any) -> str:
    return f"≈{_bare(data, 'hf-default')['median_ms'] / 2:.0f} ms"


def _hf_and_grouped(data: Any) -> str:
    return " and ".join(kilo(_bare(data, v)["tokens_per_s"]) for v in ("hf-default", "biomoe-grouped-bf16"))


def _hf_and_grouped_in_compile_run(data: Any) -> str:
    hf, grouped = (kilo(_bare(data, v)["tokens_per_s"]) for v in ("hf-default", "biomoe-grouped-bf16"))
    return f"HF default {hf} and biomoe `grouped` {grouped}"


def _same_code_on_dna_small(data: Any) -> str:
    return " and ".join(kilo(_bare(data, v, "dna-small")["tokens_per_s"])
                        for v in ("biomoe-auto-fp8-current", "biomoe-te_fused-fp8-current"))


def _te_fused_row(recipe: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        fused, te = (_bare(data, f"biomoe-{b}-{recipe}")["tokens_per_s"] for b in ("te_fused", "te"))
        return f"| {recipe} | {fused:,.0f} | {te:,.0f} |"
    return value


# --- the expert benches (``python -m bench.experts``, ``python -m bench.expert_gemms``) ---

def _speeds(data: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(c["size"], c["variant"], c["kernels"]): c for c in data["contenders"]}


def _fewest_runs(data: Any) -> str:
    return WORDS[min(len(c["runs"]) for c in data["contenders"])]


def _torch_over_te_layers(data: Any) -> str:
    speeds = _speeds(data)
    ratios = [speeds[(size, variant, "torch")]["tokens_per_s"] / speeds[(size, variant, "te")]["tokens_per_s"]
              for size in ("base", "4x") for variant in ("dense", "moe")]
    return (f"dense {ratios[0]:.2f}x and moe {ratios[1]:.2f}x at base size, "
            f"{ratios[2]:.2f}x and {ratios[3]:.2f}x at 4x")


def _vs_dense(data: Any, variant: str, kernels: str = "torch") -> list[str]:
    speeds = _speeds(data)
    return [f"{speeds[(size, variant, kernels)]['vs_dense']:.2f}x" for size in ("base", "4x")
            if (size, variant, kernels) in speeds]


def _moe_vs_dense(data: Any) -> str:
    base, wide = _vs_dense(data, "moe")
    return f"moe {base} of dense at base and {wide} at 4x"


def _fine_vs_dense(data: Any) -> str:
    (fine, fine_wide), (many, many_wide) = _vs_dense(data, "fine"), _vs_dense(data, "fine64")
    return f"fine-grained {fine} and {fine_wide}, 64 experts {many} and {many_wide}"


def _gemm_ratio_range(impl: str, digits: int) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        key = f"{impl}_over_dense"
        return span((r[key] for r in data["rows"] if key in r), f"{{:.{digits}f}}", "-")
    return value


def _gemm_tflops_range(key: str) -> Callable[[Any], str]:
    def value(data: Any) -> str:
        return span((r[key] for r in data["rows"] if key in r), "{:.0f}", "-")
    return value


def _quack_over_dense_words(data: Any) -> str:
    ratios = [r["quack_over_dense"] for r in data["rows"]]
    return f"({min(ratios):.2f}x to {max(ratios):.2f}x;"


def _gemm_row(data: Any, size: str, variant: str) -> dict[str, Any]:
    return next(r for r in data["rows"] if (r["size"], r["variant"]) == (size, variant))


def _swiglu_gradient_over_cublas(size: str) -> Callable[[Any], str]:
    """quack's SwiGLU-gradient GEMM against its cuBLAS counterpart, over the variants of one size."""
    def value(data: Any) -> str:
        ratios = [r["quack_best_ms"]["dswiglu"] / r["dense_ms"]["dswiglu"] for r in data["rows"] if r["size"] == size]
        return _range(ratios, "{:.1f}") + "x"
    return value


def _with_swiglu_at_base(data: Any) -> str:
    moe, fine = (_gemm_row(data, "base", v)["quack_over_dense_with_swiglu"] for v in ("moe", "fine"))
    return f"({moe:.2f}x moe, {fine:.2f}x fine)"


def _quack_share_of_grouped_layer(data: Any) -> str:
    shares = [100 * r["quack_total_ms"] / r["torch_grouped_step_ms"] for r in data["rows"]]
    return _range(shares, "{:.0f}") + " %"


def _quack_moe_by_width(data: Any) -> str:
    base, wide = (_gemm_row(data, s, "moe")["quack_over_dense"] for s in ("base", "4x"))
    return f"(quack {base:.2f}x at base, {wide:.2f}x at 4x"


def _quack_over_grouped(data: Any) -> list[float]:
    speeds = _speeds(data)
    return [speeds[("base", v, "quack")]["tokens_per_s"] / speeds[("base", v, "torch")]["tokens_per_s"]
            for v in ("moe", "fine")]


def _quack_gain(data: Any) -> str:
    moe, fine = _quack_over_grouped(data)
    return f"the 8-expert MoE {moe:.2f}x, the fine-grained {fine:.2f}x"


def _quack_vs_dense(variant: str) -> Callable[[Any], str]:
    return lambda data: f"{variant} {_speeds(data)[('base', variant, 'quack')]['vs_dense']:.2f}x"


def _quack_step_vs_dense(data: Any) -> str:
    moe, fine = (_speeds(data)[("base", v, "quack")]["vs_dense"] for v in ("moe", "fine"))
    return f"{moe:.2f}x (moe) and {fine:.2f}x (fine)"


def _moe_rates_grouped_and_quack(data: Any) -> str:
    grouped, quack = (kilo(_speeds(data)[("base", "moe", k)]["tokens_per_s"], 0) for k in ("torch", "quack"))
    return f"{grouped} / {quack}"


def _gpu_time_to_dense(data: Any, name: str, group: str) -> float:
    """Training seconds ``name`` needs to first reach the dense model's bits/base at the tokens every run
    reached, over the dense model's own (as the study's report computes it)."""
    runs = {c["name"]: c for c in data["contenders"]}
    common = min(max(t for points in c["curve"].values() for t, _ in points) for c in runs.values())
    dense = runs["base-dense"]
    target = [b for t, b in dense["curve"][group] if t <= common][-1]

    def seconds(run: dict[str, Any]) -> float:
        reached = next(t for t, b in run["curve"][group] if b <= target)
        return next(s for t, s in run["seconds"] if t == reached)
    return seconds(runs[name]) / seconds(dense)


def _moe_gpu_time(data: Any) -> str:
    return f"{_gpu_time_to_dense(data, 'base-moe', 'held-out strains'):.2f}x"


def _fine_gpu_time(data: Any) -> str:
    strains, species = (_gpu_time_to_dense(data, "base-fine", g) for g in ("held-out strains", "held-out species"))
    return f"{strains:.2f}x (strains) and {species:.2f}x (species)"


def _rate_over_quack(speeds: Any, variant: str) -> float:
    """How much of a ``grouped`` run's GPU time the same run takes at quack's step rate."""
    rates = _speeds(speeds)
    return rates[("base", variant, "torch")]["tokens_per_s"] / rates[("base", variant, "quack")]["tokens_per_s"]


def _moe_gpu_time_on_quack(study: Any, speeds: Any) -> str:
    return f"{_gpu_time_to_dense(study, 'base-moe', 'held-out strains') * _rate_over_quack(speeds, 'moe'):.2f}x"


def _fine_gpu_time_on_quack(study: Any, speeds: Any) -> str:
    strains, species = (_gpu_time_to_dense(study, "base-fine", g) * _rate_over_quack(speeds, "fine")
                        for g in ("held-out strains", "held-out species"))
    return f"{strains:.2f}x and {species:.2f}x"


_PROFILED = "biomoe-grouped-bf16"


def _profiled_step(text: str) -> str:
    return f"biomoe's {gpu_ms_per_step(text, _PROFILED):.0f} ms step is {_gemm_ms(text):.1f} ms of bf16 grouped GEMMs"


def _gemm_ms(text: str) -> float:
    return operator_ms_per_step(text, _PROFILED, "aten::_grouped_mm")


def _profiled_gemm_rate(text: str) -> str:
    return f"≈{round(expert_gemm_tflops(text, _PROFILED, 'mixtral-2layer', 4096), -2):.0f} TFLOP/s"


def _profiled_rest(text: str) -> str:
    adamw = operator_ms_per_step(text, _PROFILED, "aten::_fused_adamw_")
    rest = gpu_ms_per_step(text, _PROFILED) - _gemm_ms(text) - adamw
    return f"≈{adamw:.0f} ms of fused AdamW over 2.9 B parameters (memory-bound) and ≈{rest:.0f} ms"


HEADLINES = (
    # Summary
    Headline(DOC, "the genome fit read 711.1k", RECIPES_C, lambda d: kilo(_rate(d, "genome", 65536, "biomoe-cli"))),
    Headline(DOC, "575.4k here (range 470.9–625.7k)", SWEEP_SMALL, _sweep_genome_fit),
    Headline(DOC, "three commands of 349 s", SWEEP_SMALL, _wall_seconds),
    Headline(DOC, "430 s (training rows)", SWEEP_MIXTRAL, _wall_seconds),
    Headline(DOC, "303 s (inference rows", SWEEP_INFERENCE, _wall_seconds),
    Headline(DOC, "MFU is against 790 TFLOP/s (the bf16 matmul rate measured on this H200)", SINGLE,
             lambda d: f"{d['peak_tflops_for_mfu']:.0f} TFLOP/s"),
    # One run per row
    Headline(DOC, "the whole sweep in one process (347 s)", SINGLE, _wall_seconds),
    Headline(DOC, "(1.22× at 16,384 tokens)", SINGLE, _bare_loop_ratio),
    Headline(DOC, "(87.1k against 87.4k at 16,384; 54.2k against 57.0k at 4,096 in", OPTIMIZER_VARIANTS,
             _moment_dtype_rates),
    Headline(DOC, "is slower still (82.6k and 49.5k)", OPTIMIZER_VARIANTS, _torch_master_rates),
    Headline(DOC, "gains 7 % at 16,384 and 5 % at 4,096 tokens", SINGLE, _compile_gains),
    Headline(DOC, "(10 % in this run", SINGLE, _compile_loss_on_dna_small),
    Headline(DOC, "17 % after that fix, 178.4k against 215.5k", CLI_COMPILE, _compile_after_fix),
    Headline(DOC, "59.5k against 56.3k at mixtral 4,096", CLI_COMPILE,
             _against("mixtral-2layer", 4096, "biomoe-cli-compile", "biomoe-cli")),
    Headline(DOC, "the CLI gains 37 % over its", SINGLE, _fit_fp8_gain),
    # The recipes users run
    Headline(DOC, "Each row ran three times, interleaved", RECIPES_C, _repeats),
    Headline(DOC, "605.2k (1.29×) on the genome shape and 156.2k (1.11×) on dna-small in run A", RECIPES_A, _run_a),
    Headline(DOC, "641.3k (1.38×) and 194.1k (1.39×) in run B", RECIPES_B, _run_b),
    Headline(DOC, "The data path costs at most 1 %", RECIPES_C, _data_path_cost),
    Headline(DOC, "711.1k / 712.1k, 178.8k / 171.5k, 52.0k / 52.4k, 81.9k / 82.6k", RECIPES_C, _loader_and_repeated),
    Headline(DOC, "90 % on the genome shape, 80 % on dna-small, 67 % and 88 %", RECIPES_C, _recipes_fit_over_loop),
    Headline(DOC, "(1,809 against 1,505 on the genome shape, 1,673 / 1,527 on dna-small, 750 / 561 on mixtral-2layer",
             RECIPES_C, _fit_and_loop_kernels),
    Headline(DOC, "run A): 630k against 605k", RECIPES_A, _bf16_true),
    Headline(DOC, "dna-small fell to 141.1k", RECIPES_B,
             lambda d: kilo(_rate(d, "dna-small", 16384, "biomoe-cli-graphs"))),
    Headline(DOC, "(kernels per step 1,673 → 1,210)", RECIPES_B, _graphs_torch_kernels),
    Headline(DOC, "(181.8k on dna-small, 596.8k against 641.3k on the genome shape)", RECIPES_B, _graphs_torch_rates),
    Headline(DOC, "(639 kernels in 213 ms", RECIPES_C, _hf_host_time),
    Headline(DOC, "# run C, 331 s", RECIPES_C, _wall_seconds),
    # The full sweep
    Headline(DOC, "every row three times interleaved with HF", SWEEP_SMALL, _repeats),
    Headline(DOC, "(90 ms for 84–87 ms steps)", SWEEP_SMALL, _loop_host_and_step),
    Headline(DOC, "31–32 ms for 53–175 ms steps", SWEEP_MIXTRAL, _loop_host_and_step),
    Headline(DOC, "The host then spends 1.7–2.2 ms per step on the small", SWEEP_SMALL, _graph_host),
    Headline(DOC, "shapes and 0.9–1.1 ms at mixtral-2layer", SWEEP_MIXTRAL, _graph_host),
    Headline(DOC, "(90–100 ms on the small shapes)", SWEEP_SMALL, _graph_step),
    Headline(DOC, "0.84–0.97× of the eager loop on the small shapes", SWEEP_SMALL, _graph_over_loop),
    Headline(DOC, "0.93–0.95× at mixtral-2layer", SWEEP_MIXTRAL, _graph_over_loop),
    Headline(DOC, "the fit is 87 % and 96 % of the loop", SWEEP_MIXTRAL, _nomaster_over_loop),
    Headline(DOC, "them 67 % and 88 %, and twice HF's peak memory", SWEEP_MIXTRAL, _master_over_loop),
    Headline(DOC, "(fit 1.31× its bf16, loop 1.42×)", SWEEP_MIXTRAL, _fp8_over_bf16),
    # Inference
    Headline(DOC, "`score-fasta` 3.43 s cold, 3.67 s warm against HF's 6.06 s and 6.04 s (1.64×), `embed` 1.62×",
             CPU_FRESH, _cpu_scoring),
    Headline(DOC, "`score-variants` 1.36×, `generate` 1.62× (8 samples) and 1.39× (1)", CPU_FRESH,
             _cpu_variants_and_generation),
    # Bare training loop only
    Headline(DOC, "agree at step 0 (4.655 vs 4.671;", BARE_LOOP, _first_losses),
    Headline(DOC, "(311 s on one H200)", BARE_LOOP, _wall_seconds),
    Headline(DOC, "MFU is against 790 TFLOP/s, the bf16 matmul rate", BARE_LOOP,
             lambda d: f"{d['environment']['peak_bf16_tflops_reference']:.0f} TFLOP/s"),
    Headline(DOC, "biomoe at 262,144 bases: 28.8 GB, 21.7k tokens/s", BARE_LOOP, _longest_sequence_point),
    Headline(DOC, "(72.8k tokens/s vs 68.6k with torch layers only", LAYER_ABLATION, _te_layers_against_torch),
    # Why FP8 does not pay off, Caveats
    Headline(DOC, "from 9 % slower to 2 % faster than `grouped`", BARE_LOOP, _te_fp8_against_grouped),
    Headline(DOC, "2× HF default would be ≈43 ms per step", BARE_LOOP, _half_hf_step),
    Headline(DOC, "biomoe's 53 ms step is 24.5 ms of bf16 grouped GEMMs", BARE_LOOP_PROFILE, _profiled_step),
    Headline(DOC, "≈700 TFLOP/s, close to", BARE_LOOP_PROFILE, _profiled_gemm_rate),
    Headline(DOC, "≈15 ms of fused AdamW over 2.9 B parameters (memory-bound) and ≈14 ms", BARE_LOOP_PROFILE,
             _profiled_rest),
    Headline(DOC, "HF default 47.2k and biomoe `grouped` 73.5k", BARE_COMPILE, _hf_and_grouped_in_compile_run),
    Headline(DOC, "47.3k and 72.8k in [layer-ablation]", LAYER_ABLATION, _hf_and_grouped),
    Headline(DOC, "against 47.8k and 74.1k here", BARE_LOOP, _hf_and_grouped),
    Headline(DOC, "gave 142.6k and 109.5k", BARE_LOOP, _same_code_on_dna_small),
    # Figures behind decisions in the code
    *(Headline(DOC, quote, BARE_LOOP, _te_fused_row(recipe)) for recipe, quote in (
        ("fp8-current", "| fp8-current | 71,477 | 67,557 |"),
        ("fp8-block", "| fp8-block | 74,617 | 73,286 |"),
        ("fp8-delayed", "| fp8-delayed | 75,675 | 74,124 |"))),
    Headline(DOC, "92.0k against 85.7k tokens/s (+7 %)", SINGLE, _compile_at_16k),
    Headline(DOC, "59.0k against 56.2k (+5 %) at 4,096, but 192.8k against 214.6k", SINGLE,
             _compile_at_4k_and_dna_small),
    Headline(DOC, "at least three runs of each", SPEED, _fewest_runs),
    Headline(DOC, "dense 1.29x and moe 1.46x at base size, 1.20x and 1.15x at 4x", SPEED, _torch_over_te_layers),
    Headline(DOC, "moe 0.74x of dense at base and 0.81x at 4x", SPEED, _moe_vs_dense),
    Headline(DOC, "fine-grained 0.55x and 0.62x, 64 experts 0.51x and 0.58x", SPEED, _fine_vs_dense),
    Headline(DOC, "(1.16x to 1.45x;", GEMMS, _quack_over_dense_words),
    Headline(DOC, "2.6–3.0x its time at base", GEMMS, _swiglu_gradient_over_cublas("base")),
    Headline(DOC, "and 1.8–1.9x at 4x: its epilogue", GEMMS, _swiglu_gradient_over_cublas("4x")),
    Headline(DOC, "alone is 2.6–3.0x its cuBLAS twin at base", GEMMS, _swiglu_gradient_over_cublas("base")),
    Headline(DOC, "(0.94x moe, 1.05x fine)", GEMMS, _with_swiglu_at_base),
    Headline(DOC, "quack's six take 36–62 % of its time", GEMMS, _quack_share_of_grouped_layer),
    Headline(DOC, "(quack 1.30x at base, 1.16x at 4x for the 8-expert MoE)", GEMMS, _quack_moe_by_width),
    Headline(DOC, "2.0-2.5x the dense six", "results/experts/gemms-triton/gemms.json", _gemm_ratio_range("triton", 1)),
    Headline(DOC, "against quack's 1.16-1.45x", GEMMS, _gemm_ratio_range("quack", 2)),
    Headline(DOC, "quack runs 442-595", GEMMS, _gemm_tflops_range("quack_tflops")),
    Headline(DOC, "against cuBLAS's 635-694", GEMMS, _gemm_tflops_range("dense_tflops")),
    Headline(DOC, "the 8-expert MoE 1.10x, the fine-grained 1.17x", SPEED_QUACK, _quack_gain),
    Headline(DOC, "still missed**: moe 0.81x of dense", SPEED_QUACK, _quack_vs_dense("moe")),
    Headline(DOC, "fine 0.63x (aim 0.85x)", SPEED_QUACK, _quack_vs_dense("fine")),
    Headline(DOC, "the step runs at 0.81x (moe) and 0.63x (fine) of dense", SPEED_QUACK, _quack_step_vs_dense),
    Headline(DOC, "at quack's 1.10x", SPEED_QUACK, lambda d: f"{_quack_over_grouped(d)[0]:.2f}x"),
    Headline(DOC, "(0.91 × 992k / 1,095k)", SPEED_QUACK, _moe_rates_grouped_and_quack),
    Headline(DOC, "with 0.91x its GPU time on `grouped`", STUDY, _moe_gpu_time),
    Headline(DOC, "1.37x (strains) and 1.50x (species)", STUDY, _fine_gpu_time),
    Headline(DOC, "step rate that is 0.82x", STUDY, _moe_gpu_time_on_quack, also=(SPEED_QUACK,)),
    Headline(DOC, "become 1.17x and 1.28x", STUDY, _fine_gpu_time_on_quack, also=(SPEED_QUACK,)),
    Headline(DOC, "to within about 2e-5 nats per base", USE_COMMANDS, _log_likelihood_spread),
    Headline(DOC, "+0.009 bits/base after 400 steps", "results/quality/moment-dtypes.json",
             lambda d: f"+{d['runs']['bf16']['vs_fp32_at_400']:.3f}"),
    Headline(DOC, "at 1.8–2.0× HF's memory", SWEEP_MIXTRAL, _fit_memory_over_hf),
)
