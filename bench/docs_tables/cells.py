"""Cells and table text shared by every family of tables."""

from __future__ import annotations

from bench.docs_tables.report import DATES_NOT_IN_FILE, Report
from bench.records import HF_STRONGEST, BenchRecord


def kilo(value: float) -> str:
    return f"{value / 1e3:,.1f}k"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def spread(record: BenchRecord) -> str:
    low, high = record.tokens_per_s_range or (record.tokens_per_s, record.tokens_per_s)
    return f"{low / 1e3:,.1f}–{high / 1e3:,.1f}k"


def shape_label(record: BenchRecord) -> str:
    return f"{record.shape}, {record.tokens_per_step:,} tok/step"


def pick(records: list[BenchRecord], case: str, contender: str, precision: str = "bf16") -> BenchRecord | None:
    for r in records:
        if r.case == case and r.contender == contender and r.precision == precision and r.status == "ok":
            return r
    return None


def best_fp8(records: list[BenchRecord], case: str, contender: str) -> BenchRecord | None:
    fp8 = [r for r in records if r.case == case and r.contender == contender and r.status == "ok"
           and r.precision.startswith("fp8") and r.tokens_per_s]
    return max(fp8, key=lambda r: r.tokens_per_s) if fp8 else None


def cases(records: list[BenchRecord]) -> list[str]:
    return list(dict.fromkeys(r.case for r in records))


def against(record: BenchRecord | None, base: BenchRecord | None, with_range: bool = False,
            with_precision: bool = False) -> str:
    """``575.4k (1.24×; 471–626k)``: the row's median, its ratio to ``base``, its range."""
    if record is None:
        return "—"
    parts = [ratio(record.tokens_per_s / base.tokens_per_s if base else None)]
    if with_precision:
        parts[0] += f", {record.precision}"
    if with_range and len(record.runs) > 1:
        parts.append(spread(record))
    return f"{kilo(record.tokens_per_s)} ({'; '.join(parts)})"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def hf_configurations_run(records: list[BenchRecord]) -> str:
    ran = [c for c in HF_STRONGEST if any(r.contender == c and r.status == "ok" for r in records)]
    missing = [c for c in HF_STRONGEST if c not in ran]
    text = f"HF configurations run: {', '.join(f'`{c}`' for c in ran)}"
    if not missing:
        return text
    return (text + f"; not run: {', '.join(f'`{c}`' for c in missing)}, so these ratios are not against "
            "the fastest HF configuration and await re-measurement")


def dated(rep: Report) -> str:
    """The file's date, saying where it comes from when the file records none."""
    if rep.path in DATES_NOT_IN_FILE and not rep.data.get("date") and not rep.data.get("environment", {}).get("date"):
        return f"{rep.date} (the day the file was committed; it records no date)"
    return rep.date


def bold_lowest(values: list[float], digits: int = 4) -> list[str]:
    """Each value to ``digits`` places, the lowest in bold (bits per base: lower is better)."""
    low = min(values)
    return [f"**{v:.{digits}f}**" if v == low else f"{v:.{digits}f}" for v in values]
