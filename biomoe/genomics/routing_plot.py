"""The routing figures: one heatmap per MoE block, genomes (grouped by species) by experts; and,
for a result with genomic classes, one heatmap per MoE block of experts by classes (enrichment).

Kept apart from :mod:`biomoe.genomics.routing` so that the figure can be redrawn from the JSON
alone (``--from_json``) and matplotlib, an optional dependency, is only imported to draw.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from biomoe.errors import GenomeInputError
from biomoe.files import save_figure

__all__ = ["features_plot_path", "grouped_rows", "plot_features", "plot_routing", "require_matplotlib"]

PANELS_PER_ROW = 4
GROUP_TITLES = {"region": "region", "codon_position": "codon\n(coding)", "gene_strand": "strand\n(coding)",
                "window_gc": "window GC", "species": "species"}
MIN_LOG2_LIMIT = 0.25
"""The colour scale spans at least +-this (log2): a model with no preference still shows as pale, not saturated."""


def require_matplotlib() -> None:
    """Fail before any work when the figure cannot be drawn."""
    try:
        import matplotlib  # noqa: F401  (optional dependency)
    except ImportError:
        raise GenomeInputError(None, "drawing the routing figure needs matplotlib: pip install 'biomoe[plot]' "
                                     "(or pass --no_plot)") from None


def grouped_rows(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, int, int]]]:
    """Genome labels in plotting order (species in order of first appearance, genomes in input order
    within each) and the species blocks as ``(species, first row, end row)``."""
    order: list[str] = []
    blocks: list[tuple[str, int, int]] = []
    for name, members in report["species"].items():
        blocks.append((name, len(order), len(order) + len(members)))
        order.extend(members)
    return order, blocks


def plot_routing(report: dict[str, Any], out_path: str | Path, dpi: int = 150, atomic: bool = True) -> Path:
    """Draw the heatmaps of a routing report (see :func:`biomoe.genomics.routing.routing_report`)
    and write them atomically to ``out_path``; ``atomic=False`` writes the file as named, for a
    caller whose ``out_path`` is already a temporary it commits with other outputs."""
    import matplotlib  # optional dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory


    try:
        layers = [str(layer) for layer in report["moe_layers"]]
        rows, blocks = grouped_rows(report)
        data = {layer: np.array([report["genomes"][g]["fractions"][layer] for g in rows], dtype=np.float64)
                for layer in layers}
        experts = int(report["num_experts"])
    except (KeyError, TypeError, ValueError) as exc:
        raise GenomeInputError(None, f"routing result is incomplete ({type(exc).__name__}: {exc})") from None
    cols = min(PANELS_PER_ROW, len(layers))
    grid_rows = math.ceil(len(layers) / cols)
    label_width = max((len(g) for g in rows), default=4) * 0.07
    width = cols * (0.32 * experts + 0.5) + label_width + 2.2
    height = grid_rows * (0.26 * len(rows) + 0.9) + 0.9
    fig, axes = plt.subplots(grid_rows, cols, figsize=(width, height), squeeze=False, layout="constrained")
    vmax = max(float(values.max()) for values in data.values())
    image = None
    for index, ax in enumerate(axes.flat):
        if index >= len(layers):
            ax.set_axis_off()
            continue
        layer = layers[index]
        image = ax.imshow(data[layer], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xticks(range(experts), [str(e) for e in range(experts)], fontsize=7)
        first_column = index % cols == 0
        ax.set_yticks(range(len(rows)), rows if first_column else [], fontsize=7)
        if index // cols == grid_rows - 1 or index + cols >= len(layers):
            ax.set_xlabel("expert", fontsize=8)
        for _, first, _end in blocks[1:]:  # a line between species
            ax.axhline(first - 0.5, color="white", linewidth=2.0)
        if index % cols == cols - 1 or index == len(layers) - 1:  # species names at the right of each row
            to_axes = blended_transform_factory(ax.transAxes, ax.transData)
            for name, first, end in blocks:
                ax.text(1.03, (first + end - 1) / 2, name, transform=to_axes, fontsize=8, va="center",
                        ha="left", fontweight="bold")
    title = (f"Expert routing per genome (top-{report.get('top_k', '?')}, "
             f"{report.get('windows_requested', '?')} windows x {report.get('seq_length', '?')} bp)")
    return _finish(fig, axes, image, "fraction of top-k assignments", title, 0.06, out_path, dpi, atomic)


def _finish(fig: Any, axes: Any, image: Any, bar_label: str, title: str, bar_pad: float, out_path: str | Path,
            dpi: int, atomic: bool) -> Path:
    """Colour bar, title and the write every routing figure ends with (the figure is closed)."""
    import matplotlib.pyplot as plt  # optional dependency

    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.9, pad=bar_pad)
    bar.set_label(bar_label, fontsize=8)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    try:
        if atomic:
            save_figure(fig, out_path, dpi)
        else:
            fig.savefig(out_path, dpi=dpi)
    finally:
        plt.close(fig)
    return Path(out_path)


def features_plot_path(plot: str | Path) -> Path:
    """Where the class figure goes: beside the routing heatmap, ``routing.png`` -> ``routing-features.png``."""
    plot = Path(plot)
    return plot.with_name(f"{plot.stem}-features{plot.suffix or '.png'}")


def _feature_panels(report: dict[str, Any]) -> tuple[list[str], list[str], list[tuple[str, int, int]],
                                                     dict[str, np.ndarray], int]:
    """Layers, class labels (in group order), group blocks ``(group, first column, end column)``
    and log2 enrichment [expert, class] per layer (NaN where undefined) of a report's features."""
    try:
        features = report["features"]
        layers = [str(layer) for layer in report["moe_layers"]]
        experts = int(report["num_experts"])
        groups = list(features["groups"])
        labels: list[str] = []
        blocks: list[tuple[str, int, int]] = []
        for group in groups:
            names = [str(n) for n in features["groups"][group]]
            blocks.append((group, len(labels), len(labels) + len(names)))
            labels.extend(names)
        data = {}
        for layer in layers:
            columns = []
            for group in groups:
                table = np.array(features["per_layer"][layer][group]["enrichment"], dtype=np.float64)  # None -> NaN
                if table.shape != (experts, len(features["groups"][group])):
                    raise ValueError(f"layer {layer} {group}: enrichment of shape {table.shape}")
                columns.append(table)
            with np.errstate(divide="ignore"):
                data[layer] = np.log2(np.concatenate(columns, axis=1))
    except (KeyError, TypeError, ValueError) as exc:
        raise GenomeInputError(None, f"routing result has incomplete genomic classes ({type(exc).__name__}: {exc})"
                               ) from None
    return layers, labels, blocks, data, experts


def plot_features(report: dict[str, Any], out_path: str | Path, dpi: int = 150, atomic: bool = True) -> Path:
    """Draw, per MoE block, experts x genomic classes coloured by log2 enrichment (0: the expert
    takes the class as often as the data offers it) and write it to ``out_path`` (atomically
    unless ``atomic=False``, as :func:`plot_routing`). An expert that never took a class
    (enrichment 0) is drawn at the bottom of the scale; an undefined ratio is grey."""
    import matplotlib  # optional dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    layers, labels, blocks, data, experts = _feature_panels(report)
    finite = [np.abs(v[np.isfinite(v)]) for v in data.values()]
    limit = max([MIN_LOG2_LIMIT, *(float(v.max()) for v in finite if v.size)])
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="0.8")  # grey: an undefined ratio
    cols = min(PANELS_PER_ROW, len(layers))
    grid_rows = math.ceil(len(layers) / cols)
    width = cols * (0.3 * len(labels) + 0.7) + 1.8
    height = grid_rows * (0.28 * experts + 2.0) + 0.8
    fig, axes = plt.subplots(grid_rows, cols, figsize=(width, height), squeeze=False, layout="constrained")
    image = None
    for index, ax in enumerate(axes.flat):
        if index >= len(layers):
            ax.set_axis_off()
            continue
        layer = layers[index]
        values = np.where(np.isneginf(data[layer]), -limit, data[layer])  # never chosen: the bottom of the scale
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"layer {layer}", fontsize=9, pad=24)
        ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=90)
        ax.set_yticks(range(experts), [str(e) for e in range(experts)] if index % cols == 0 else [], fontsize=7)
        if index % cols == 0:
            ax.set_ylabel("expert", fontsize=8)
        to_axes = blended_transform_factory(ax.transData, ax.transAxes)
        for group, first, end in blocks:
            if first:
                ax.axvline(first - 0.5, color="black", linewidth=1.0)
            ax.text((first + end - 1) / 2, 1.01, GROUP_TITLES.get(group, group), transform=to_axes, fontsize=6,
                    ha="center", va="bottom")
    title = (f"What each expert routes: genomic classes (top-{report.get('top_k', '?')}, "
             f"{len(report.get('genomes', {}))} genomes, {report.get('windows_requested', '?')} windows x "
             f"{report.get('seq_length', '?')} bp)")
    return _finish(fig, axes, image, "log2 enrichment (0: no preference)", title, 0.04, out_path, dpi, atomic)
