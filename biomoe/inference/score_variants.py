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

from biomoe.data.reader import SequenceReader
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.files import decode_user_text
from biomoe.inference.batching import Window, WindowBatch
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import run_log_likelihood
from biomoe.model.transformer import MoETransformer

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
                  batch_tokens: int | None = None) -> list[dict[str, object]]:
    """:func:`score_variants` for windows made by :func:`prepare_windows`.

    The ref and alt windows of all variants share forward passes of up to ``batch_tokens`` tokens
    (``batch_size`` caps the variants per pass); variants that share a reference window (other
    alleles at one site) have it scored once. Every window is read from its start, so a variant's
    scores are those of its two windows scored alone."""
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
