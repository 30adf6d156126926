"""``biomoe repeat-mix``: held-out bits/base of a model alone and mixed with the repeat expert.

The base model is a checkpoint (``--ckpt``) or, without one, an order-k Markov model fitted on the
training split. The repeat table is fitted on the training split too (both strands), so the mixed
number is a held-out score like any other: same split, windows and positions as ``validate``.

    python cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --ckpt last.ckpt --json out.json
    python cli.py repeat-mix data/large/ecoli536_NC_008253.fna.gz --markov-order 7
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from biomoe.cli.arguments import CommandParser
from biomoe.genomics.markov import training_sequences
from biomoe.checkpoint.records import training_data_settings
from biomoe.data.datamodule import GenomeDataModule
from biomoe.errors import GenomeInputError
from biomoe.data.fasta import Genome
from biomoe.model.losses import LN2
from biomoe.genomics.markov import MAX_ORDER, MarkovModel
from biomoe.genomics.score_fasta import positive_int, write_output
from biomoe.files import check_outputs
from biomoe.genomics.repeat_expert import (HELD_OUT_KEYS, RepeatExpert, RepeatTable, check_settings, fit_on_split,
                                           fit_on_training_split, score_batch)
from biomoe.data.tokenizer import NucleotideTokenizer


def score(datamodule: GenomeDataModule, base_log_probs, table: RepeatTable, switch: float,
          smoothing: float, batch_size: int = 64, per_window: bool = False, follow_copies: bool = False) -> dict:
    """Sums over the validation windows. ``base_log_probs(batch) -> [B, T, V]`` log-probabilities.
    ``mixed`` is the expert following copies with ``follow_copies`` (then ``exact_mixed`` is the
    exact-match mixture beside it), exact matches only without.
    ``per_window`` adds ``windows``: contig, start, bases scored, bits/base alone and mixed, and the
    share of bases after a training k-mer, for each validation window in order."""
    sums = {"base": 0.0, "mixed": 0.0, "base_on_repeats": 0.0, "mixed_on_repeats": 0.0}
    positions = covered = 0
    windows: list[dict] = []
    dataset = datamodule.val_dataset
    for batch in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        log_probs = base_log_probs(batch)
        scores = score_batch(table, log_probs, batch["labels"], switch, smoothing, follow_copies)
        base_ll, mixed_ll = scores.base, scores.copies if follow_copies else scores.exact
        mask = batch["loss_mask"].bool().to(log_probs.device)
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
            for row in range(mask.shape[0]):
                contig, start, _ = dataset.window(len(windows))
                windows.append({"contig": contig, "start": start, "bases": int(mask[row].sum()),
                                "alone": alone[row], "mixed": mixed[row], "repeat_fraction": share[row]})
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
        table = fit_on_split(Genome(fasta), None, 0.0, k)
        if not len(table):
            raise GenomeInputError(", ".join(map(str, fasta)), f"no run of {table.k + 1} A/C/G/T bases: "
                                                               "the repeat expert would be empty")
        return RepeatExpert(table, switch, smoothing, follow_copies)
    saved = training_data_settings(ckpt)
    if not saved or not saved.get("fasta"):
        raise GenomeInputError(ckpt, "records no training FASTA for the repeat expert; "
                                     "give the training sequences with --repeat-fasta")
    try:
        genome = Genome(saved["fasta"], cache_dir=saved.get("cache_dir"))
    except GenomeInputError as exc:
        raise GenomeInputError(exc.path, f"{exc.problem} (training FASTA recorded in {ckpt}, needed for the "
                                         "repeat expert; give it with --repeat-fasta)") from None
    tokenizer = NucleotideTokenizer(fold_lowercase=saved.get("fold_lowercase", True))
    held_out = {key: saved[key] for key in HELD_OUT_KEYS if saved.get(key) is not None}
    table = fit_on_split(genome, saved.get("val_contigs"), saved.get("val_fraction", 0.1), k, tokenizer, **held_out)
    return RepeatExpert(table, switch, smoothing, follow_copies)


def checkpoint_log_probs(path: str, device: torch.device):
    from biomoe.inference.scoring import load_model

    model = load_model(path, map_location="cpu").to(device).eval()

    @torch.no_grad()
    def log_probs(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(batch["input_ids"].to(device)).logits
        return torch.log_softmax(logits.float(), dim=-1)

    return log_probs


def markov_log_probs(datamodule: GenomeDataModule, order: int):
    model = MarkovModel.fit(training_sequences(datamodule), order)
    return lambda batch: torch.log_softmax(model.logits(batch["labels"], datamodule.vocab_size), dim=-1)


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe repeat-mix", description=__doc__.splitlines()[0])
    parser.add_argument("fasta", nargs="+", help="FASTA file(s) or folder")
    parser.add_argument("--ckpt", default=None, help="biomoe checkpoint (default: an order-k Markov base)")
    parser.add_argument("--markov-order", type=int, default=7)
    parser.add_argument("--k", type=int, default=None, help="repeat context length (default: log4(2N) + 6)")
    parser.add_argument("--switch", type=float, default=0.003, help="fixed-share weight moved per base")
    parser.add_argument("--smoothing", type=float, default=0.005, help="add-δ for the repeat counts")
    parser.add_argument("--follow-copies", action="store_true",
                        help="keep following a copy past mismatches (XM-style copy expert)")
    parser.add_argument("--seq-length", type=positive_int, default=1024)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--val-contigs", nargs="*", default=None)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG of bits/base per held-out window, alone and mixed, along the genome")
    args = parser.parse_args(argv)
    check_outputs([args.json, args.plot], [*args.fasta, args.ckpt])  # never over an input
    if args.ckpt is None and not 0 <= args.markov_order <= MAX_ORDER:
        parser.error(f"--markov-order must be in 0..{MAX_ORDER}")
    check_settings(args.k, args.switch, args.smoothing)
    start = time.perf_counter()
    dm = GenomeDataModule(fasta=args.fasta, seq_length=args.seq_length, val_fraction=args.val_fraction,
                          val_contigs=args.val_contigs, rc_prob=0.0)
    dm.setup("validate")
    if dm.val_dataset is None:
        parser.error("validation is disabled (val_fraction=0 and no val_contigs)")
    table = fit_on_training_split(dm, args.k)
    k = table.k
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.ckpt is not None:
        base, base_name = checkpoint_log_probs(args.ckpt, device), args.ckpt
    else:
        base, base_name = markov_log_probs(dm, args.markov_order), f"order-{args.markov_order} Markov"
    result = score(dm, base, table, args.switch, args.smoothing, args.batch_size, per_window=args.plot is not None,
                   follow_copies=args.follow_copies)
    result.update(base=base_name, k=k, switch=args.switch, smoothing=args.smoothing, follow_copies=args.follow_copies,
                  training_bases=table.training_bases, table_entries=len(table), fasta=args.fasta,
                  seq_length=args.seq_length, seconds=time.perf_counter() - start)
    print(f"{base_name} on {result['positions']:,} held-out bases of {', '.join(args.fasta)}: "
          f"{result['base_bits_per_base']:.4f} bits/base alone, {result['mixed_bits_per_base']:.4f} "
          f"with the repeat expert (k={k}, switch {args.switch}, smoothing {args.smoothing}"
          f"{', following copies' if args.follow_copies else ''}"
          f"{'; exact matches only: %.4f' % result['exact_mixed_bits_per_base'] if args.follow_copies else ''}); "
          f"{result['repeat_fraction']:.2%} of positions follow a training k-mer: "
          f"{result['base_on_repeats_bits_per_base']:.3f} -> {result['mixed_on_repeats_bits_per_base']:.3f} "
          f"bits/base there ({result['seconds']:.0f} s)")
    windows = result.pop("windows", None)
    if args.json is not None:
        write_output(args.json, lambda target: target.write_text(json.dumps(result, indent=2) + "\n"))
    if windows is not None:
        from biomoe.training.plots import plot_repeat_gain

        title = f"{base_name} alone and with the repeat expert (k={k}), held-out windows"
        written = plot_repeat_gain(windows, args.plot, title)  # atomic; None without matplotlib
        print(f"plot: {written}" if written else "plot: skipped (matplotlib is not installed)")
    return 0
