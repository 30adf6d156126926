"""Writes ``cli.py predict`` results: per-window scores (TSV) and per-base log-likelihoods (npz).

``predict`` scores the held-out windows of the configured genome (the DataModule's predict split).
For whole FASTA files outside the training data use ``cli.py score-fasta``; for variants,
``cli.py score-variants``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter

from biomoe.data.packed import PackedGenomeDataset
from biomoe.errors import GenomeInputError
from biomoe.output_set import commit_together


class WindowScoreWriter(BasePredictionWriter):
    """Collects ``predict_step`` outputs and writes ``window_scores.tsv`` and ``per_base_loglik.npz``.

    TSV columns: window, contig, start (0-based), end, scored_bases (unambiguous A/C/G/T),
    log_likelihood (nats, summed), bits_per_base. With ``data.packing`` a line is one document of a
    packed row (a whole short record or a piece of a long contig, scored alone), numbered in genome
    order; without, one fixed window. The npz holds, like ``embed``'s, one array and
    its index: ``log_likelihood`` (float32, every window's per-base log p in nats one after the
    other, NaN where the base is not scored), and per window (in TSV order) ``window``, ``offset``
    (its first value in ``log_likelihood``), ``length``, ``start`` and ``contig`` (an index into
    ``contig_names``).

    Without ``output_dir`` the files go to ``predictions/`` inside the run's version folder (the
    logger's), so a second predict never replaces the first one's results; without a logger, to
    the first free ``predictions``, ``predictions_1``, ... under the trainer's root.
    """

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = Path(output_dir) if output_dir is not None else None

    def _folder(self, trainer) -> Path:
        if self.output_dir is not None:
            return self.output_dir
        if trainer.logger is not None and trainer.log_dir is not None:
            return Path(trainer.log_dir) / "predictions"
        root = Path(trainer.default_root_dir)
        folder, n = root / "predictions", 0
        while folder.exists() and (not folder.is_dir() or any(folder.iterdir())):  # a file there: taken too
            n += 1
            folder = root / f"predictions_{n}"
        return folder

    def on_predict_start(self, trainer, pl_module) -> None:
        """A file where the predictions folder goes is said before any window is scored."""
        _check_folder(self._folder(trainer))

    def write_on_epoch_end(self, trainer, pl_module, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        folder = _make_folder(self._folder(trainer))
        dataset = _predict_dataset(trainer)
        rows, arrays = [], {}
        flat_preds = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        flat_idx = batch_indices[0] if batch_indices and isinstance(batch_indices[0], list) and \
            batch_indices[0] and isinstance(batch_indices[0][0], list) else batch_indices
        counter = 0
        for batch_out, indices in zip(flat_preds, flat_idx or [None] * len(flat_preds)):
            loglik = batch_out["log_likelihood"].float().cpu().numpy()
            for row, row_values in enumerate(loglik):
                index = int(indices[row]) if indices is not None else counter
                counter += 1
                for number, contig, start, end, part in _pieces(dataset, index, row_values.shape[0]):
                    values = row_values[part]
                    total = float(np.nansum(values))
                    n = int((~np.isnan(values)).sum())
                    rows.append({"window": number, "contig": contig, "start": start, "end": end,
                                 "scored_bases": n, "log_likelihood": f"{total:.4f}",
                                 "bits_per_base": f"{-total / n / math.log(2):.5f}" if n else "nan"})
                    arrays[number] = values.astype(np.float32)
        rows.sort(key=lambda r: r["window"])
        names = sorted({r["contig"] for r in rows}, key=[r["contig"] for r in rows].index)
        lengths = np.array([arrays[r["window"]].size for r in rows], dtype=np.int64)
        index = {"log_likelihood": np.concatenate([arrays[r["window"]] for r in rows]) if rows
                 else np.zeros(0, dtype=np.float32),
                 "window": np.array([r["window"] for r in rows], dtype=np.int64),
                 "offset": np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if rows
                 else np.zeros(0, dtype=np.int64),
                 "length": lengths, "start": np.array([r["start"] for r in rows], dtype=np.int64),
                 "contig": np.array([names.index(r["contig"]) for r in rows], dtype=np.int32),
                 "contig_names": np.array(names, dtype=str)}
        # Under DDP each rank scores its own shard of windows: one file pair per rank.
        suffix = f".rank{trainer.global_rank}" if trainer.world_size > 1 else ""
        tsv, npz = folder / f"window_scores{suffix}.tsv", folder / f"per_base_loglik{suffix}.npz"
        # committed together (a failure leaves both earlier files), never over an input of the run
        # (the genome, the checkpoint, the config)
        with commit_together([tsv, npz]) as outputs:
            with open(outputs.temp(tsv), "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["window"], delimiter="\t")
                writer.writeheader()
                writer.writerows(rows)
            with open(outputs.temp(npz), "wb") as handle:
                np.savez_compressed(handle, **index)
        unit = "documents" if isinstance(dataset, PackedGenomeDataset) else "windows"
        print(f"predictions: {tsv} ({len(rows)} {unit}), {npz}")


def _check_folder(folder: Path) -> None:
    """A file in the place of ``folder`` (or of a parent) is one line naming it."""
    for path in (folder, *folder.parents):
        if path.exists() and not path.is_dir():
            where = "" if path == folder else f" (a parent of {folder})"
            raise GenomeInputError(path, f"is a file, not a folder{where}: predictions are written into a "
                                         "folder; move the file away or give another predictions folder")


def _make_folder(folder: Path) -> Path:
    """``folder``, created if missing (:func:`_check_folder` first)."""
    _check_folder(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GenomeInputError(folder, f"cannot create the predictions folder ({exc.strerror or exc})") from None
    return folder


def _predict_dataset(trainer) -> Any:
    loaders = trainer.predict_dataloaders
    loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
    return getattr(loader, "dataset", None)


def _pieces(dataset: Any, index: int, length: int) -> list[tuple[int, str, int, int, slice]]:
    """(number, contig, start, end, positions in the row) of what row ``index`` scored: its window,
    or each document of a packed row (whole short records and pieces of long contigs, numbered in
    genome order), so short records get their own line and padding none. A dataset that does not
    say where its rows come from gives one line per row."""
    if not hasattr(dataset, "documents"):
        return [(index, "?", -1, -1, slice(0, length))]
    out, at = [], 0
    for number, (name, start, end) in zip(dataset.document_ids(index), dataset.documents(index)):
        out.append((number, str(name), int(start), int(end), slice(at, at + end - start)))
        at += end - start
    return out
