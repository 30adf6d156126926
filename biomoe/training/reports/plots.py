"""Training-curve plots from Lightning's CSV metrics (people would rather look than read)."""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from biomoe.files import save_figure


def read_metrics(csv_path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv → {metric: [(step, value), ...]} skipping empty cells."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    with open(csv_path, newline="") as handle:
        for row in csv.DictReader(handle):
            step = int(float(row.get("step") or 0))
            for key, value in row.items():
                if key in ("step", "epoch") or value in ("", None):
                    continue
                series[key].append((step, float(value)))
    return dict(series)


def plot_training_curves(source: str | Path | Mapping[str, list[tuple[int, float]]],
                         out_path: str | Path | None = None) -> Path | None:
    """Plot train/val bits per base and throughput; returns the PNG path (None without matplotlib).

    ``source`` is a ``metrics.csv`` (the PNG goes beside it unless ``out_path`` says otherwise) or
    the series themselves (``{metric: [(step, value), ...]}``, as
    :class:`~biomoe.training.reports.history.MetricsHistory` keeps them whatever the logger; ``out_path``
    is then required)."""
    try:
        import matplotlib  # optional dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if isinstance(source, Mapping):
        if out_path is None:
            raise ValueError("plot_training_curves needs out_path when given series rather than a metrics.csv")
        series = {key: list(points) for key, points in source.items()}
    else:
        series = read_metrics(source)
    out_path = Path(out_path) if out_path else Path(source).with_name("training_curves.png")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("train/bits_per_base", "train"), ("val/bits_per_base", "validation")):
        if key in series:
            steps, values = zip(*series[key])
            axes[0].plot(steps, values, label=label, marker="o" if label == "validation" else None)
    for key in sorted(k for k in series if k.startswith("val/") and k.endswith("/bits_per_base") and k.count("/") == 2):
        steps, values = zip(*series[key])  # per-genome validation (several FASTA files)
        axes[0].plot(steps, values, linewidth=0.8, linestyle="--", label=key.split("/")[1])
    axes[0].axhline(2.0, color="grey", linestyle=":", label="uniform (2 bits)")
    if "val/markov_bits_per_base" in series:
        markov = series["val/markov_bits_per_base"][-1][1]
        axes[0].axhline(markov, color="tab:green", linestyle="--", label=f"Markov baseline ({markov:.3f})")
    _zoom_past_first_drop(axes[0], series)
    axes[0].set(xlabel="step", ylabel="bits per base", title="Loss")
    axes[0].legend()
    if "train/tokens_per_s" in series:
        steps, values = zip(*series["train/tokens_per_s"])
        axes[1].plot(steps, values)
    axes[1].set(xlabel="step", ylabel="tokens / s", title="Throughput")
    fig.tight_layout()
    save_figure(fig, out_path, dpi=110)
    plt.close(fig)
    return out_path


def _zoom_past_first_drop(ax, series: dict[str, list[tuple[int, float]]]) -> None:
    """Scale the y-axis to the curve after its first tenth, so the slow part stays readable."""
    values = [v for key in ("train/bits_per_base", "val/bits_per_base", "val/markov_bits_per_base")
              for v in (val for _, val in series.get(key, [])[len(series.get(key, [])) // 10:])]
    if values:
        low, high = min(values), max(max(values), 2.0)
        pad = max((high - low) * 0.1, 0.01)
        ax.set_ylim(low - pad, high + pad)


def plot_validation_comparison(runs: dict[str, str | Path | tuple[str | Path, str]], out_path: str | Path,
                               references: dict[str, float] | None = None,
                               metric: str = "val/bits_per_base",
                               title: str = "Held-out bits per base") -> Path | None:
    """One line per run (``label -> metrics.csv``, or ``label -> (metrics.csv, metric)`` to plot
    another column of a run, e.g. the same network with the repeat expert) of ``metric`` over steps,
    with horizontal reference lines (e.g. a Markov baseline or a published number). Comparing several
    runs on one axis is where over-fitting (a curve that turns up) is seen at a glance."""
    runs = {label: run if isinstance(run, tuple) else (run, metric) for label, run in runs.items()}
    try:
        import matplotlib  # optional dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = {label: read_metrics(csv_path).get(column, []) for label, (csv_path, column) in runs.items()}
    for label, points in series.items():
        if not points:
            raise ValueError(f"{runs[label][0]}: no {runs[label][1]!r} values to plot")
    fig, ax = plt.subplots(figsize=(13, 5))
    plotted: list[float] = []
    for label, points in series.items():
        steps, values = zip(*points)
        ax.plot(steps, values, marker=".", label=f"{label} (last {values[-1]:.3f})")
        plotted.extend(values[len(values) // 10:])
    styles = ("--", ":", "-.", (0, (5, 1)))
    for index, (label, value) in enumerate((references or {}).items()):
        style = styles[index % len(styles)]
        ax.axhline(value, color="grey", linestyle=style, label=f"{label} ({value:.3f})")
        plotted.append(value)
    if plotted:
        low, high = min(plotted), max(plotted)
        pad = 0.05 * (high - low or 1.0)
        ax.set_ylim(low - pad, high + pad)
    ax.set(xlabel="step", ylabel="held-out bits/base" if len({c for _, c in runs.values()}) > 1 else metric,
           title=title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: curves stay visible
    fig.tight_layout()
    out_path = Path(out_path)
    save_figure(fig, out_path, dpi=110)
    plt.close(fig)
    return out_path


def plot_repeat_gain(windows: list[dict], out_path: str | Path, title: str) -> Path | None:
    """Held-out bits/base per window along the genome, a model alone and mixed with the repeat
    expert, and the share of each window that follows a training k-mer: where the copies are and
    what they save. ``windows`` as :func:`biomoe.genomics.repeat_mix.score` returns them (in order)."""
    try:
        import matplotlib  # optional dependency

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    contigs = list(dict.fromkeys(w["contig"] for w in windows))
    fig, axes = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    offset = 0.0
    for contig in contigs:  # contigs side by side, in the order they were scored
        rows = [w for w in windows if w["contig"] == contig]
        x = [offset + (w["start"] - rows[0]["start"]) / 1e3 for w in rows]
        axes[0].plot(x, [w["alone"] for w in rows], color="tab:grey", linewidth=0.8,
                     label="alone" if offset == 0 else None)
        axes[0].plot(x, [w["mixed"] for w in rows], color="tab:blue", linewidth=0.8,
                     label="with the repeat expert" if offset == 0 else None)
        axes[1].fill_between(x, [100 * w["repeat_fraction"] for w in rows], step="mid", color="tab:orange")
        offset = x[-1] + 1.0
    total = sum(w["bases"] for w in windows) or 1
    alone = sum(w["alone"] * w["bases"] for w in windows) / total
    mixed = sum(w["mixed"] * w["bases"] for w in windows) / total
    axes[0].set_ylabel("bits/base per window")
    axes[0].set_title(f"{title}\nall windows: {alone:.4f} alone, {mixed:.4f} mixed")
    axes[0].legend(loc="lower left")
    axes[1].set_ylabel("% after a\ntraining k-mer")
    axes[1].set_xlabel("kb into the held-out region" + (" (contigs side by side)" if len(contigs) > 1 else ""))
    fig.tight_layout()
    save_figure(fig, out_path, dpi=120)
    plt.close(fig)
    return out_path
