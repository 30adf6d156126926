"""Held-out bits/base of a model alone and mixed with the repeat expert: the numbers of ``repeat-mix``.

The base model is a function from a batch to ``[B, T, V]`` log-probabilities: a network's
(:func:`model_log_probs`) or an order-k Markov model's fitted on the training split
(:func:`markov_log_probs`). The repeat table is fitted on the training split too (both strands),
so the mixed number is a held-out score like any other: same split, windows and positions as
``validate``. :func:`expert_for_checkpoint` builds the repeat expert a checkpoint's scores are
mixed with (``score-fasta --repeat-expert``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from biomoe.checkpoint.records import training_data_settings
from biomoe.data.sources.registry import open_reader
from biomoe.data.tokenizer import PAD_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.genomics.markov import MarkovModel, training_sequences
from biomoe.genomics.repeat_expert import (HELD_OUT_KEYS, BatchScores, RepeatExpert, RepeatTable, check_settings,
                                           fit_on_split, score_batch)
from biomoe.model.documents import documents_as_rows
from biomoe.model.losses import LN2
from biomoe.model.transformer import MoETransformer

if TYPE_CHECKING:  # only a type here: importing the datamodule imports Lightning (seconds), which
    # score-fasta --repeat-expert, a user of expert_for_checkpoint, never needs
    from biomoe.data.datamodule import GenomeDataModule

__all__ = ["LogProbs", "expert_for_checkpoint", "markov_log_probs", "model_log_probs", "score"]

LogProbs = Callable[[dict[str, Tensor]], Tensor]
"""A base model for :func:`score`: a validation batch -> ``[B, T, V]`` log-probabilities."""


def score_rows(table: RepeatTable, log_probs: Tensor, batch: dict[str, Tensor], switch: float, smoothing: float,
               follow_copies: bool = False) -> tuple[BatchScores, Tensor]:
    """:func:`score_batch` of a batch, and its loss mask in the same layout. Packed rows are scored
    one document a row, so that the expert's k-mer context and its switching state start afresh
    at every document, as the network's attention does; fixed windows are scored as they are."""
    labels = batch["labels"].to(log_probs.device)
    mask = batch["loss_mask"].bool().to(log_probs.device)
    if batch.get("position_ids") is not None:
        positions = batch["position_ids"].to(log_probs.device)
        log_probs, labels, mask = documents_as_rows(positions, log_probs, labels, mask, fill=(0.0, PAD_ID, False))
        real = labels[:, 0] != PAD_ID  # the padding at a row's end is no document
        log_probs, labels, mask = log_probs[real], labels[real], mask[real]
    return score_batch(table, log_probs, labels, switch, smoothing, follow_copies), mask


def _origins(dataset, first_row: int, rows: int) -> list[tuple[str, int]]:
    """Contig and start of what :func:`score_rows` scores for rows ``first_row...``: each window,
    or each document of the packed rows."""
    return [(contig, start) for i in range(first_row, first_row + rows) for contig, start, _ in dataset.documents(i)]


def score(datamodule: GenomeDataModule, base_log_probs: LogProbs, table: RepeatTable, switch: float,
          smoothing: float, batch_size: int = 64, per_window: bool = False, follow_copies: bool = False) -> dict:
    """Sums over the validation windows. ``base_log_probs(batch) -> [B, T, V]`` log-probabilities.
    ``mixed`` is the expert following copies with ``follow_copies`` (then ``exact_mixed`` is the
    exact-match mixture beside it), exact matches only without.
    ``per_window`` adds ``windows``: contig, start (with packed rows: of each document), bases scored,
    bits/base alone and mixed, and the share of bases after a training k-mer, for each validation
    window (or document) in order."""
    sums = {"base": 0.0, "mixed": 0.0, "base_on_repeats": 0.0, "mixed_on_repeats": 0.0}
    positions = covered = 0
    windows: list[dict] = []
    dataset = datamodule.val_dataset
    rows_done = 0
    for batch in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        log_probs = base_log_probs(batch)
        scores, mask = score_rows(table, log_probs, batch, switch, smoothing, follow_copies)
        base_ll, mixed_ll = scores.base, scores.copies if follow_copies else scores.exact
        repeat = mask & scores.opinion
        sums["base"] -= float(base_ll[mask].double().sum())
        sums["mixed"] -= float(mixed_ll[mask].double().sum())
        sums["base_on_repeats"] -= float(base_ll[repeat].double().sum())
        sums["mixed_on_repeats"] -= float(mixed_ll[repeat].double().sum())
        if follow_copies:  # the exact-match mixture comes with it: report both, as RepeatMixture does
            sums["exact_mixed"] = sums.get("exact_mixed", 0.0) - float(scores.exact[mask].double().sum())
        positions += int(mask.sum())
        covered += int(repeat.sum())
        if per_window:
            n = mask.sum(-1).clamp_min(1)
            alone = (-(base_ll * mask).sum(-1) / n / LN2).tolist()
            mixed = (-(mixed_ll * mask).sum(-1) / n / LN2).tolist()
            share = (repeat.sum(-1) / n).tolist()
            origins = _origins(dataset, rows_done, batch["labels"].shape[0])
            for row, (contig, start) in enumerate(origins):
                windows.append({"contig": contig, "start": start, "bases": int(mask[row].sum()),
                                "alone": alone[row], "mixed": mixed[row], "repeat_fraction": share[row]})
        rows_done += batch["labels"].shape[0]
    bits = {name: value / LN2 / max(positions if "repeats" not in name else covered, 1)
            for name, value in sums.items()}
    result = {"positions": positions, "repeat_positions": covered,
              "repeat_fraction": covered / max(positions, 1),
              **{f"{name}_bits_per_base": value for name, value in bits.items()}}
    if per_window:
        result["windows"] = windows
    return result


def expert_for_checkpoint(ckpt: str, fasta: list[str] | None = None, k: int | None = None,
                          switch: float = 0.003, smoothing: float = 0.005,
                          follow_copies: bool = False) -> RepeatExpert:
    """The repeat expert a checkpoint's scores are mixed with. Without ``fasta``: fitted on the
    training split the checkpoint was trained on (FASTA paths and split settings as ``fit`` saved
    them), the same table ``RepeatMixture`` and ``repeat-mix`` use. With ``fasta``: fitted on all
    of those files (for a checkpoint whose training files moved, or any reference of your choice)."""
    check_settings(k, switch, smoothing)
    if fasta:
        table = fit_on_split(open_reader(fasta), None, 0.0, k)
        if not len(table):
            raise GenomeInputError(", ".join(map(str, fasta)), f"no run of {table.k + 1} A/C/G/T bases: "
                                                               "the repeat expert would be empty")
        return RepeatExpert(table, switch, smoothing, follow_copies)
    saved = training_data_settings(ckpt)
    if not saved or not saved.get("fasta"):
        raise GenomeInputError(ckpt, "records no training FASTA for the repeat expert; "
                                     "give the training sequences with --repeat-fasta")
    try:
        genome = open_reader(saved["fasta"], cache_dir=saved.get("cache_dir"))
    except GenomeInputError as exc:
        raise GenomeInputError(exc.path, f"{exc.problem} (training FASTA recorded in {ckpt}, needed for the "
                                         "repeat expert; give it with --repeat-fasta)") from None
    tokenizer = NucleotideTokenizer(fold_lowercase=saved.get("fold_lowercase", True))
    held_out = {key: saved[key] for key in HELD_OUT_KEYS if saved.get(key) is not None}
    table = fit_on_split(genome, saved.get("val_contigs"), saved.get("val_fraction", 0.1), k, tokenizer, **held_out)
    return RepeatExpert(table, switch, smoothing, follow_copies)


def model_log_probs(model: MoETransformer) -> LogProbs:
    """A network as :func:`score`'s base model: log-softmax of its logits, under bf16 autocast on
    CUDA, on the device its weights are on (put it in eval mode first)."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def log_probs(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(batch["input_ids"].to(device)).logits
        return torch.log_softmax(logits.float(), dim=-1)

    return log_probs


def markov_log_probs(datamodule: GenomeDataModule, order: int) -> LogProbs:
    """An order-``order`` Markov model fitted on the training split as :func:`score`'s base model."""
    model = MarkovModel.fit(training_sequences(datamodule), order)
    return lambda batch: torch.log_softmax(model.logits(batch["labels"], datamodule.vocab_size), dim=-1)
