"""Zero-shot variant effects as a log-likelihood ratio, and the variant tables they are read from.

For a substitution at 1-based ``position`` the model scores a window of ``window`` bases centred on
it (shifted inward at contig ends) twice, with the reference and with the alternative allele, and
reports ``llr = log p(alt window) - log p(ref window)`` in nats. The model is causal, so the window
must include the bases *after* the variant: they are where a change to, e.g., a motif shows up as
surprise. Negative values mean the model finds the alternative less likely.

The table is TSV with columns contig, position, ref, alt (an optional header line and ``#``
comments are skipped). Substitutions of any length are scored (ref and alt of equal length);
indels are refused, because windows of different lengths are not comparable by summed likelihood.
A reference allele that does not match the genome stops with one line naming the variant.

A ``.vcf``, ``.vcf.gz`` or ``.bcf`` file is read with pysam (``pip install 'biomoe[vcf]'``): every
ALT allele of a record is one variant. Real call sets mix SNVs with indels and symbolic alleles
(``<DEL>``, ``*``); those records are skipped and counted (``score-variants`` reports the count
on stderr) rather than refused, so a VCF can be scored as it comes from a caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from biomoe.data.reader import SequenceReader
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.files import decode_user_text
from biomoe.inference.batching import Window, WindowBatch, default_batch_tokens, prefetch, run_batches
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import run_log_likelihood
from biomoe.model.losses import per_position_log_likelihood
from biomoe.model.transformer import KVCache, MoETransformer

__all__ = ["VCF_SUFFIXES", "Variant", "is_vcf", "prepare_windows", "read_variants", "read_vcf", "score_variants",
           "score_windows", "variant_windows"]

VCF_SUFFIXES: tuple[str, ...] = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")


@dataclass(frozen=True)
class Variant:
    contig: str
    position: int  # 1-based, as in VCF
    ref: str
    alt: str

    def label(self) -> str:
        return f"{self.contig}:{self.position} {self.ref}>{self.alt}"


def read_variants(path: str | os.PathLike[str]) -> list[Variant]:
    """Parse the TSV table; malformed lines raise GenomeInputError with the line number."""
    variants = []
    for lineno, line in enumerate(_read_table_text(Path(path)).splitlines(), start=1):
        fields = line.strip().split("\t") if "\t" in line else line.split()
        if not fields or fields[0].startswith("#") or (lineno == 1 and fields[0].lower() in ("contig", "chrom")):
            continue
        if len(fields) < 4:
            raise GenomeInputError(path, f"line {lineno}: expected contig, position, ref, alt; got {line!r}")
        contig, pos, ref, alt = fields[:4]
        if not (pos.isascii() and pos.isdigit()) or int(pos) < 1:
            raise GenomeInputError(path, f"line {lineno}: position must be a 1-based integer, got {pos!r}")
        ref, alt = ref.upper(), alt.upper()
        if not ref or not alt or set(ref + alt) - set("ACGT"):
            raise GenomeInputError(path, f"line {lineno}: ref/alt must be A/C/G/T, got {ref}>{alt}")
        if len(ref) != len(alt):
            raise GenomeInputError(path, f"line {lineno}: {contig}:{pos} {ref}>{alt} is an indel; only "
                                         "substitutions (equal-length ref and alt) are scored")
        variants.append(Variant(contig, int(pos), ref, alt))
    return variants


def is_vcf(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path).lower().endswith(VCF_SUFFIXES)


def read_vcf(path: str | os.PathLike[str]) -> tuple[list[Variant], int]:
    """Substitutions of a VCF/BCF (one per ALT allele) and the number of ALT alleles skipped
    (indels, symbolic alleles, records without ALT)."""
    try:
        import pysam  # optional dependency
    except ImportError:
        raise GenomeInputError(path, "reading VCF needs pysam: pip install 'biomoe[vcf]'") from None
    if not os.path.isfile(path):
        raise GenomeInputError(path, "no such file" if not os.path.exists(path) else "is not a file")
    variants: list[Variant] = []
    skipped = 0
    verbosity = pysam.set_verbosity(0)  # htslib's own warnings would repeat our one-line errors
    try:
        with pysam.VariantFile(os.fspath(path)) as vcf:
            for record in vcf:
                ref = (record.ref or "").upper()
                for alt in record.alts or ():
                    alt = alt.upper()
                    if len(alt) != len(ref) or not ref or set(ref + alt) - set("ACGT"):
                        skipped += 1
                        continue
                    variants.append(Variant(record.chrom, int(record.pos), ref, alt))
                if not record.alts:
                    skipped += 1
    except (ValueError, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise GenomeInputError(path, f"cannot read as VCF/BCF ({detail})") from None
    finally:
        pysam.set_verbosity(verbosity)
    return variants, skipped


def _read_table_text(path: Path) -> str:
    """The table as text; a missing, unreadable, compressed or binary file is a one-line error."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise GenomeInputError(path, "no such file") from None
    except IsADirectoryError:
        raise GenomeInputError(path, "is a folder, not a variant table") from None
    except PermissionError:
        raise GenomeInputError(path, "permission denied (not readable)") from None
    except OSError as exc:
        raise GenomeInputError(path, f"cannot read ({exc.strerror or exc})") from None
    return decode_user_text(raw, path, "a text table", " (the variant table must be plain-text TSV: gunzip it)")


def variant_windows(genome: SequenceReader, variant: Variant, window: int, source: str,
                    lengths: Mapping[str, int] | None = None) -> tuple[int, str, str]:
    """(window start, ref window, alt window); checks the contig, bounds and reference allele.
    ``lengths``: contig name -> length of ``genome`` (read from its contigs when not given)."""
    lengths = _contig_lengths(genome) if lengths is None else lengths
    if variant.contig not in lengths:
        raise GenomeInputError(source, f"variant {variant.label()}: contig '{variant.contig}' is not in the genome")
    length = lengths[variant.contig]
    begin = variant.position - 1
    end = begin + len(variant.ref)
    if end > length:
        raise GenomeInputError(source, f"variant {variant.label()}: position beyond contig end ({length:,} bp)")
    actual = genome.fetch(variant.contig, begin, end).upper()
    if actual != variant.ref:
        raise GenomeInputError(source, f"variant {variant.label()}: reference allele {variant.ref} does not match "
                                       f"the genome ({actual}) at {variant.contig}:{variant.position}")
    if len(variant.ref) > window:
        # The window must hold the whole substitution; otherwise the alt window would be spliced
        # out of range and compared, at a different length, with the ref window.
        raise GenomeInputError(source, f"variant {variant.label()}: {len(variant.ref)} bases do not fit in "
                                       f"the scoring window of {window} bases (raise --window)")
    size = min(window, length)
    start = min(max(begin + len(variant.ref) // 2 - size // 2, 0), length - size)
    ref_seq = genome.fetch(variant.contig, start, start + size).upper()
    offset = begin - start
    alt_seq = ref_seq[:offset] + variant.alt + ref_seq[offset + len(variant.ref):]
    return start, ref_seq, alt_seq


def score_variants(model: InferenceModel | MoETransformer, genome: SequenceReader, variants: list[Variant],
                   window: int = 1024, source: str = "variants", batch_size: int | None = None, progress=None,
                   batch_tokens: int | None = None) -> list[dict[str, object]]:
    """One dict per variant: the inputs plus window_start (0-based), logp_ref, logp_alt, llr (nats).
    ``progress`` (tqdm-like) advances by one per scored variant."""
    prepared = prepare_windows(genome, variants, window, source)
    return score_windows(model, variants, prepared, batch_size, progress, batch_tokens)


def prepare_windows(genome: SequenceReader, variants: list[Variant], window: int,
                    source: str = "variants") -> list[tuple[int, str, str]]:
    """Every variant's (window start, ref window, alt window): all are checked before any is scored."""
    lengths = _contig_lengths(genome)
    return [variant_windows(genome, v, window, source, lengths) for v in variants]


def _contig_lengths(genome: SequenceReader) -> dict[str, int]:
    """Contig name -> length, as variants name contigs."""
    return {c.name: c.length for c in genome.contigs}


def score_windows(model: InferenceModel | MoETransformer, variants: list[Variant],
                  prepared: list[tuple[int, str, str]], batch_size: int | None = None, progress=None,
                  batch_tokens: int | None = None, share_prefix: bool | None = None) -> list[dict[str, object]]:
    """:func:`score_variants` for windows made by :func:`prepare_windows`.

    The ref and alt windows of all variants share forward passes of up to ``batch_tokens`` tokens
    (``batch_size`` caps the variants per pass). With ``share_prefix`` (default: on CUDA) the alt
    window is not read from its start: the model is causal, so up to the variant it sees exactly
    what the ref window holds, and the alt pass continues from the ref pass's keys and values at the
    variant (:func:`_score_sharing_prefix`), about a quarter less work for a centred variant. Without
    it (the CPU default, whose numbers stay those of scoring each window alone) variants that share
    a reference window (other alleles at one site) have it scored once."""
    model = InferenceModel.wrap(model)
    if share_prefix is None:
        share_prefix = model.device.type == "cuda"
    if share_prefix:
        logp = _score_sharing_prefix(model, variants, prepared, batch_tokens, batch_size, progress)
        return _rows(variants, prepared, logp)
    tokenizer = NucleotideTokenizer()
    logp = np.zeros((len(variants), 2), dtype=np.float64)
    ref_rows: dict[tuple[str, int, str], int] = {}
    shared: list[tuple[int, int]] = []  # (variant, the variant whose reference window it reuses)

    def windows():
        for j, ((start, ref_seq, alt_seq), variant) in enumerate(zip(prepared, variants)):
            key = (variant.contig, start, ref_seq)
            if key in ref_rows:
                shared.append((j, ref_rows[key]))
            else:
                ref_rows[key] = j
                yield Window((j, 0), tokenizer.encode(ref_seq))
            yield Window((j, 1), tokenizer.encode(alt_seq))

    def place(batch: WindowBatch, ll: np.ndarray) -> None:
        for row, window in enumerate(batch.windows):
            j, allele = window.key
            logp[j, allele] = float(np.nansum(ll[row, :window.ids.size]))
        if progress is not None:
            progress.update(sum(allele for _, allele in (w.key for w in batch.windows)))

    rows_cap = 2 * batch_size if batch_size else None
    run_log_likelihood(model, windows(), place, batch_tokens, rows_cap)
    for j, source in shared:
        logp[j, 0] = logp[source, 0]
    return _rows(variants, prepared, logp)


def _rows(variants: list[Variant], prepared: list[tuple[int, str, str]], logp: np.ndarray) -> list[dict[str, object]]:
    rows = []
    for (start, _, _), variant, (logp_ref, logp_alt) in zip(prepared, variants, logp):
        rows.append({"contig": variant.contig, "position": variant.position, "ref": variant.ref,
                     "alt": variant.alt, "window_start": start, "logp_ref": float(logp_ref),
                     "logp_alt": float(logp_alt), "llr": float(logp_alt - logp_ref)})
    return rows


def _score_sharing_prefix(model: InferenceModel, variants: list[Variant], prepared: list[tuple[int, str, str]],
                          batch_tokens: int | None, batch_size: int | None, progress) -> np.ndarray:
    """``[variants, 2]`` log p of the ref and alt windows, the alt pass reusing the ref pass's cache.

    Variants are grouped by (window length, offset of the variant in it), so a batch shares one
    cache length; a window's label at the variant (offset o) is predicted from the same input in
    both windows, so its alt log p is read off the ref pass's logits, and the alt pass feeds the
    inputs after it (o + 1 .. end) on top of the ref cache cut back to o + 1 tokens."""
    tokenizer = NucleotideTokenizer()
    device = model.device
    budget = batch_tokens or default_batch_tokens(device)
    groups: dict[tuple[int, int], list[int]] = {}
    for j, ((start, ref_seq, _), variant) in enumerate(zip(prepared, variants)):
        groups.setdefault((len(ref_seq), variant.position - 1 - start), []).append(j)
    logp = np.zeros((len(variants), 2), dtype=np.float64)

    def batches():
        for (length, offset), members in groups.items():
            rows = max(1, budget // max(1, 2 * length - offset - 1))
            rows = min(rows, batch_size) if batch_size else rows
            for first in range(0, len(members), rows):
                chunk = members[first:first + rows]
                ids = np.stack([tokenizer.encode(prepared[j][1]) for j in chunk]
                               + [tokenizer.encode(prepared[j][2]) for j in chunk])
                tokens = torch.from_numpy(ids)
                if device.type == "cuda":
                    tokens = tokens.pin_memory()
                yield WindowBatch([Window((j, offset), ids[i]) for i, j in enumerate(chunk)], tokens,
                                  np.full(len(chunk), length, dtype=np.int64))

    def compute(tokens: torch.Tensor, batch: WindowBatch) -> dict[str, torch.Tensor]:
        rows, length = len(batch.windows), tokens.shape[1]
        offset = batch.windows[0].key[1]
        ref, alt = tokens[:rows], tokens[rows:]
        with model.running():
            cache = KVCache(model.config, rows, length, device=device, dtype=model.dtype)
            inputs = torch.cat([torch.full_like(ref[:, :1], BOS_ID), ref[:, :-1]], dim=1)
            ref_logits = model.module(inputs, cache=cache).logits
            ref_ll = _masked_ll(ref_logits, ref)
            alt_at_variant = _masked_ll(ref_logits[:, offset:offset + 1], alt[:, offset:offset + 1])
            alt_sum = ref_ll[:, :offset].nansum(-1) + alt_at_variant.nansum(-1)
            if offset + 1 < length:
                cache.length = offset + 1
                tail = model.module(alt[:, offset:length - 1], cache=cache).logits
                alt_sum = alt_sum + _masked_ll(tail, alt[:, offset + 1:]).nansum(-1)
        return {"ref": ref_ll.nansum(-1), "alt": alt_sum}

    def place(batch: WindowBatch, out: dict[str, np.ndarray]) -> None:
        for row, window in enumerate(batch.windows):
            logp[window.key[0]] = out["ref"][row], out["alt"][row]
        if progress is not None:
            progress.update(len(batch.windows))

    run_batches(prefetch(batches()), device, compute, place)
    return logp


def _masked_ll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    ll = per_position_log_likelihood(logits, labels)
    return torch.where(NucleotideTokenizer.unambiguous_mask(labels), ll, torch.full_like(ll, float("nan")))
