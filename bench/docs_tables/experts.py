"""The expert-kernel tables: speed of each model alone, the expert GEMMs, the loss match."""

from __future__ import annotations

import functools

from bench.docs_tables.cells import table
from bench.docs_tables.report import DocsTableError, Report, Table


EXPERT_SIZES = {"base": "base (hidden 512, 8 layers)", "4x": "4x (hidden 1,024, 8 layers)"}
EXPERT_VARIANTS = {"dense": "dense", "moe": "moe (8 experts, top-2)", "fine": "fine (32 experts, top-8)",
                   "fine64": "fine64 (64 experts, top-8)"}


def _speed_rows(rep: Report) -> dict[tuple[str, str, str], dict]:
    """The measured rows of a ``bench.experts speed`` file by (size, variant, kernels)."""
    rows_in = rep.data.get("contenders")
    if not isinstance(rows_in, list):
        raise DocsTableError(f"{rep.path}: not an expert speed table (no 'contenders' list)")
    return {(r["size"], r["variant"], r["kernels"]): r for r in rows_in if "tokens_per_s" in r}


def expert_speed(reports: list[Report]) -> str:
    """Each model alone, torch's and TE's layer kernels side by side (``bench.experts speed``)."""
    (rep,) = reports
    by = _speed_rows(rep)

    def cells(row: dict | None, with_detail: bool) -> list[str]:
        if row is None:
            return ["–", "–"] + (["–", "–"] if with_detail else [])
        runs = sum("tokens_per_s" in run for run in row["runs"])
        rate = f"{row['tokens_per_s'] / 1e3:,.0f}k" + (f" ({runs} runs)" if runs != 3 else "")
        out = [rate, f"{row['vs_dense']:.2f}x"]
        return out + [f"{100 * row['mfu']:.1f} %", f"{row['peak_memory_gib']:.1f} GiB"] if with_detail else out

    rows = []
    for size, size_label in EXPERT_SIZES.items():
        for i, (variant, label) in enumerate(EXPERT_VARIANTS.items()):
            torch_row, te_row = by.get((size, variant, "torch")), by.get((size, variant, "te"))
            if torch_row is None and te_row is None:
                continue
            rows.append([size_label if i == 0 else "", label, *cells(torch_row, True), *cells(te_row, False)])
    lines = table(["size", "model", "torch layers: tokens/s", "vs dense", "MFU", "peak", "TE layers: tokens/s",
                   "vs dense"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", f"Medians of the runs of each row (three unless noted), each model alone on one {rep.gpu()}, "
              f"{rep.date}; MFU against the GPU's datasheet bf16 peak. File: `{rep.path}` (commands in "
              "`speed.md` beside it)."]
    return "\n".join(lines) + "\n"


def expert_speed_quack(reports: list[Report]) -> str:
    """Each model alone, the experts on torch's grouped GEMM and on quack's (``--kernels torch,quack``)."""
    (rep,) = reports
    by = _speed_rows(rep)

    def cells(row: dict | None) -> list[str]:
        if row is None:
            return ["–", "–", "–"]
        runs = sum("tokens_per_s" in run for run in row["runs"])
        low, high = row["tokens_per_s_range"]
        return [f"{row['tokens_per_s'] / 1e3:,.0f}k ({low / 1e3:,.0f}–{high / 1e3:,.0f}k, {runs} runs)",
                f"{row['vs_dense']:.2f}x", f"{row['peak_memory_gib']:.1f} GiB"]

    rows = []
    for size, size_label in EXPERT_SIZES.items():
        first = True
        for variant, label in EXPERT_VARIANTS.items():
            grouped, quack = by.get((size, variant, "torch")), by.get((size, variant, "quack"))
            if grouped is None and quack is None:
                continue
            gain = f"{quack['tokens_per_s'] / grouped['tokens_per_s']:.2f}x" if grouped and quack else "–"
            rows.append([size_label if first else "", label, *cells(grouped), *cells(quack), gain])
            first = False
    lines = table(["size", "model", "grouped experts: tokens/s", "vs dense", "peak", "quack experts: tokens/s",
                   "vs dense", "peak", "quack / grouped"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    lines += ["", f"Medians (range) of interleaved runs, each model alone on one {rep.gpu()}, {rep.date}; torch's "
              "layer kernels, compiled blocks; the dense model has no experts, so both columns compare with its "
              f"one row. File: `{rep.path}` (commands in `speed.md` beside it)."]
    return "\n".join(lines) + "\n"


def expert_gemms(reports: list[Report], impl: str = "quack") -> str:
    """The six expert GEMMs of one training step against the dense twin's (``bench.expert_gemms``),
    on ``impl``'s kernels (``quack`` or ``triton``)."""
    (rep,) = reports
    rows_in = rep.data.get("rows")
    if not isinstance(rows_in, list):
        raise DocsTableError(f"{rep.path}: not an expert GEMM report (no 'rows' list)")
    rows = []
    for r in rows_in:
        if "error" in r:
            rows.append([r["size"], r["variant"], "failed", "", "", "", "", "", ""])
            continue
        if f"{impl}_total_ms" not in r:
            raise DocsTableError(f"{rep.path}: row {r['size']} {r['variant']} has no {impl} timing")
        worst = max(max(r[f"{impl}_error"].values()), max(r[f"{impl}_error_skewed"].values()))
        swiglu = r["dense_swiglu_ms"]
        rows.append([r["size"], f"{r['variant']} ({r['experts']} x top-{r['top_k']})",
                     f"{r['dense_total_ms']:.2f}", f"{r[f'{impl}_total_ms']:.2f}", f"{r[f'{impl}_over_dense']:.2f}x",
                     f"{swiglu['swiglu fwd']:.2f} + {swiglu['swiglu bwd']:.2f}",
                     f"{r[f'{impl}_over_dense_with_swiglu']:.2f}x",
                     f"{r['torch_grouped_step_ms']:.2f} ({r['torch_grouped_over_dense']:.2f}x)", f"{worst:.1e}"])
    lines = table(["size", "experts", "dense six GEMMs, ms", f"{impl} six, ms", f"{impl} / dense",
                   "dense SwiGLU fwd + bwd, ms", f"{impl} / (dense + SwiGLU)", "torch grouped layer, ms",
                   f"{impl} worst error"], rows)
    lines[1] = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    env = rep.data.get("environment", {})
    versions = (f"quack-kernels {env.get('quack-kernels')}, nvidia-cutlass-dsl {env.get('nvidia-cutlass-dsl')}"
                if impl == "quack" else f"{impl} {env.get(impl)}")
    lines += ["", f"{rep.data['rows'][0]['tokens']:,} tokens "
              f"per step, `do_bench` medians, one {rep.gpu()}, {rep.date}; torch {env.get('torch')}, {versions}. "
              "Worst error: relative to float32, unit-scale inputs, uniform and skewed routing. File: "
              f"`{rep.path}` (command and per-op times in `gemms.md` beside it)."]
    return "\n".join(lines) + "\n"


def loss_match(reports: list[Report]) -> str:
    """The same fit on other expert kernels (``bench.experts match``): loss gaps against the reference."""
    (rep,) = reports
    d = rep.data
    if not isinstance(d.get("deviations"), dict):
        raise DocsTableError(f"{rep.path}: not a loss-curve match (no 'deviations')")
    rows = []
    for name, c in d["contenders"].items():
        final = f"{c['loss'][-1]:.4f}" if c.get("loss") else "–"
        gap = d["deviations"].get(name)
        if gap is None:
            rows.append([f"`{name}` (reference)", final, "–", "–", "–", "–"])
            continue
        verdict = {True: "yes", False: "**no**"}.get(gap.get("within_noise"), "the yardstick")
        rows.append([f"`{name}`", final, f"{gap['mean_abs']:.4f}", f"{gap['max_abs']:.4f}",
                     f"{gap['last_tenth_mean_abs']:.4f}", verdict])
    lines = table(["kernels", "final training loss", "mean gap", "largest gap", "mean gap, last tenth",
                   "within bf16 noise"], rows)
    lines[1] = "| --- | ---: | ---: | ---: | ---: | --- |"
    lines += ["", f"{d['steps']:,} steps of the {d['size']} {d['variant']} model, same seed and data order, the "
              f"three fits side by side on one {rep.gpu()}, {rep.date}; gaps in training loss (nats) against "
              f"`{d['reference']}` at every logged step. Within noise: mean gap, overall and over the last tenth, "
              f"at most {d['noise_factor']}x that of `{d['noise']}` (the same kernels with compile off). File: "
              f"`{rep.path}` (command in `match.md` beside it)."]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Table] = {
    "expert-speed": Table(("results/experts/speed/speed.json",), expert_speed),
    "expert-speed-quack": Table(("results/experts/speed-quack/speed.json",), expert_speed_quack),
    "expert-gemms": Table(("results/experts/gemms/gemms.json",), expert_gemms),
    "expert-loss-match": Table(("results/experts/quack-loss-match/match.json",), loss_match),
    "expert-gemms-triton": Table(("results/experts/gemms-triton/gemms.json",),
                                 functools.partial(expert_gemms, impl="triton")),
}
