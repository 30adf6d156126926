"""Zero-shot variant effects as a log-likelihood ratio, and the variant tables they are read from.

A variant at 1-based ``position`` replaces the reference allele ``ref`` (the genome's bases from
``position`` on) with ``alt``. The model scores a window of ``window`` bases centred on ``ref``
(shifted inward at contig ends), the *ref window*, and the same window with ``ref`` replaced by
``alt``, the *alt window*, and reports ``llr = log p(alt window) - log p(ref window)`` in nats.
The model is causal, so the window must include the bases *after* the variant: they are where a
change to, e.g., a motif shows up as surprise. Negative values mean the model finds the
alternative less likely.

For a substitution (``ref`` and ``alt`` of equal length, any length) both windows have the same
length and differ only at the changed bases. An indel (``ref`` and ``alt`` of different lengths,
written VCF-style with the base before it: ``AT>A`` deletes a T, ``A>ATTG`` inserts TTG) keeps
the same flanks: the alt window is longer or shorter than the ref window by the length
difference, and both are summed over all their own bases. The llr of an indel therefore includes
the inserted bases' own log-likelihood (in the alt window) or the deleted bases' (in the ref
window): a neutral insertion of k bases the model cannot predict scores about ``k * log(4)``
(1.39 nats per base) lower than the change to the flanks alone, a deletion of such bases about as
much higher. Compare an indel's llr with those of indels of similar length and kind, not with
substitutions. Both alleles must fit in the window; an insertion's alt window may reach a few
bases past the window (and past the training length, when that is the window).

The table is TSV (or columns separated by spaces) with columns contig, position, ref, alt and an
optional id. Blank lines, ``#`` comments and Windows line endings are skipped anywhere. A header
line, plain or after ``#`` (``chrom pos ref alt``, ``#CHROM POS ID REF ALT``, any case), may name
the columns, in any order (``contig/chrom, position/pos, ref, alt, id``), so score-variants' own
output and skipped list read back as tables; a header that names only some keeps the fixed order,
with the 5th column the id when the header calls it ``id``. Without a header the 5th column is not
read. Alleles are A/C/G/T; substitutions and indels are scored alike.

VCF and BCF files are read by :mod:`biomoe.inference.variant_vcf`, which sets aside, with the
reason, the alleles that are not sequence (symbolic, ``*``, breakends, N or IUPAC codes).

Contigs are named as :class:`~biomoe.data.contig_names.ContigNames` resolves them: the full FASTA
ID, its accession (``NC_011333.1`` or ``NC_011333`` for ``gi|208433976|ref|NC_011333.1|``) or a
unique prefix. A variant on an unknown contig, beyond the contig end or whose reference allele
does not match the genome stops with one line naming it, unless skipping is asked for
(:func:`check_variants`), which sets such variants aside with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from biomoe.data.contig_names import AmbiguousContigError, ContigNameError, ContigNames
from biomoe.data.sources.reader import SequenceReader
from biomoe.data.tokenizer import NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.user_text import decode_user_text
from biomoe.inference.batching import Window, WindowBatch
from biomoe.inference.load import InferenceModel
from biomoe.inference.scoring import run_log_likelihood
from biomoe.inference.shared_prefix import Substitution, continues_from_prefix, score_substitutions
from biomoe.model.transformer import MoETransformer

__all__ = ["SkippableVariantError", "Variant", "check_variants", "prepare_windows", "read_variants",
           "score_variants", "score_windows", "variant_windows"]


@dataclass(frozen=True)
class Variant:
    contig: str
    position: int  # 1-based, as in VCF
    ref: str
    alt: str
    id: str = "."  # the VCF ID or the table's id column, so results can be joined back
    info: tuple[tuple[str, str], ...] = ()  # (INFO key, value as written to the results)

    def label(self) -> str:
        return f"{self.contig}:{self.position} {self.ref}>{self.alt}"


_HEADER_NAMES = {"contig": "contig", "chrom": "contig", "position": "position", "pos": "position", "ref": "ref",
                 "alt": "alt", "id": "id"}
_REQUIRED = ("contig", "position", "ref", "alt")
_FIXED_ORDER = {"contig": 0, "position": 1, "ref": 2, "alt": 3}
_EXPECTED = "contig (or chrom), position (or pos), ref, alt[, id]"
_COLUMN_WORD = re.compile(r"[A-Za-z_][\w.-]*")


def _split_fields(line: str) -> list[str]:
    """A line's cells: tab-separated when it has a tab (so an empty cell, such as a missing id,
    keeps its place), else separated by any whitespace, as tables typed by hand are."""
    if "\t" in line:
        return [field.strip() for field in line.strip().split("\t")]
    return line.split()


def _named_columns(fields: list[str]) -> dict[str, int]:
    """Index of each column a header names (the first, where a name repeats)."""
    named: dict[str, int] = {}
    for i, name in enumerate(fields):
        key = _HEADER_NAMES.get(name.lower())
        if key is not None and key not in named:
            named[key] = i
    return named


def _table_columns(header: list[str]) -> dict[str, int]:
    """Column indices of a table's header line: by name when it names contig, position, ref and
    alt; else the fixed order, with the id 5th when the header calls that column ``id``."""
    named = _named_columns(header)
    if set(_REQUIRED) <= set(named):
        return named
    columns = dict(_FIXED_ORDER)
    if len(header) > 4 and header[4].lower() == "id":
        columns["id"] = 4
    return columns


def _is_position(text: str) -> bool:
    return text.isascii() and text.isdigit()  # '1²' passes str.isdigit but int() refuses it


def _is_header(fields: list[str]) -> bool:
    """Whether a line before the first variant names the columns: its first word names the
    contig column, or its words name all four required columns (in any order)."""
    named = _named_columns(fields)
    return bool(fields) and (named.get("contig") == 0 or set(_REQUIRED) <= set(named))


def _is_commented_header(fields: list[str]) -> bool:
    """A ``#`` line is a header only when it reads like one: it starts with a column name and
    every word could be a column's name. Prose above a table ("# contig names follow NCBI;
    position is 1-based") also names columns, but its punctuation gives it away."""
    return (bool(fields) and fields[0].lower() in _HEADER_NAMES and _is_header(fields)
            and all(_COLUMN_WORD.fullmatch(word) for word in fields))


def _header_problem(fields: list[str]) -> str | None:
    """Why a first row that looks like a header (its position is not a number and it names a
    column) cannot be read as one; None when it is a header or looks like data."""
    named = _named_columns(fields)
    if _is_position(fields[1] if len(fields) > 1 else "") or not named or _is_header(fields):
        return None
    missing = ", ".join(key for key in _REQUIRED if key not in named)
    return f"the header names no {missing} column; name the columns {_EXPECTED}, in any order"


def _column_order(columns: dict[str, int]) -> str:
    return ", ".join(sorted(columns, key=columns.__getitem__))


def read_variants(path: str | os.PathLike[str]) -> list[Variant]:
    """Parse the table; a malformed variant line raises GenomeInputError with its line number.

    Tables come from spreadsheets, scripts and editors, so what carries no variant is skipped
    wherever it is: blank and whitespace-only lines, ``#`` comments, Windows line endings. Before
    the first variant, a ``#`` line or a plain first row that names the columns is the header
    (a plain row only when its position column is not a number, so a contig called ``chrom``
    still reads as data)."""
    variants: list[Variant] = []
    columns = dict(_FIXED_ORDER)
    header_line = 0  # where the column order was named; 0 for the fixed order
    first_row = True  # the first line that is neither blank nor a comment
    for lineno, line in enumerate(_read_table_text(Path(path)).splitlines(), start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            header = _split_fields(text.lstrip("#"))
            if not variants and _is_commented_header(header):
                columns, header_line = _table_columns(header), lineno
            continue
        fields = _split_fields(line)
        if first_row:
            first_row = False
            problem = _header_problem(fields)
            if problem is not None:
                raise GenomeInputError(path, f"line {lineno}: {problem}")
            if not _is_position(fields[1] if len(fields) > 1 else "") and _is_header(fields):
                columns, header_line = _table_columns(fields), lineno
                continue
        variants.append(_parse_variant(path, lineno, line, fields, columns, header_line))
    return variants


def _parse_variant(path: str | os.PathLike[str], lineno: int, line: str, fields: list[str],
                   columns: dict[str, int], header_line: int) -> Variant:
    """One variant line in the given column order, or a one-line error naming file and line."""
    needed = max(v for k, v in columns.items() if k != "id") + 1
    if len(fields) < needed:
        required = {k: v for k, v in columns.items() if k != "id"}
        order = _column_order(required)
        # a header's own order is said, so a row written in the usual order shows why it failed
        named = (f" in {needed} columns, as the header on line {header_line} names them"
                 if header_line and required != _FIXED_ORDER else "")
        raise GenomeInputError(path, f"line {lineno}: expected {order}{named}; got {line.strip()!r}")
    contig, pos, ref, alt = (fields[columns[key]] for key in _REQUIRED)
    if not _is_position(pos) or int(pos) < 1:
        raise GenomeInputError(path, f"line {lineno}: position must be a 1-based integer, got {pos!r}")
    ref, alt = ref.upper(), alt.upper()
    if not ref or not alt or set(ref + alt) - set("ACGT"):
        # '-' or an empty allele is how some tools write an indel; here it carries the base before it
        hint = (" (write an indel VCF-style, with the base before it: AT>A, A>ATTG)"
                if "-" in ref + alt or not ref or not alt else "")
        raise GenomeInputError(path, f"line {lineno}: ref/alt must be A/C/G/T, got {ref}>{alt}{hint}")
    ident = fields[columns["id"]] if "id" in columns and len(fields) > columns["id"] else ""
    return Variant(contig, int(pos), ref, alt, ident or ".")


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


class SkippableVariantError(GenomeInputError):
    """A variant the genome cannot score as given (unknown contig, beyond the contig end, reference
    allele not in the genome): stops the run, or is set aside with ``reason`` when asked to."""

    def __init__(self, path, problem: str, reason: str) -> None:
        super().__init__(path, problem)
        self.reason = reason


def upper_bases(genome: SequenceReader) -> Callable[[int, int, int], str]:
    """``read(contig index, start, end)``: those bases of ``genome``, upper-cased (soft-masked
    lower case is the same base to the model and to the reference-allele check)."""
    def read(contig: int, start: int, end: int) -> str:
        return genome.fetch(contig, start, end).upper()

    return read


def variant_windows(genome: SequenceReader, variant: Variant, window: int, source: str,
                    names: ContigNames | None = None, centre: int | None = None,
                    read: Callable[[int, int, int], str] | None = None) -> tuple[int, str, str]:
    """(window start, ref window, alt window); checks the contig, bounds, reference allele and that
    both alleles fit in ``window``. The alt window is the ref window with ``ref`` replaced by
    ``alt``: as long as it for a substitution, longer or shorter by the difference for an indel.
    ``names``: the contigs of ``genome`` (built from it when not given). ``centre``: the 1-based
    position to centre the window on instead of the variant (variants near each other, e.g. the
    SNVs of one codon, then share one reference window), moved as little as needed to hold the
    variant. ``read(contig index, start, end)``: those bases upper-cased (:func:`upper_bases` when not
    given; :func:`check_variants` passes one that remembers recent windows, so variants that share
    a window read it once)."""
    names = ContigNames(genome) if names is None else names
    try:
        index = names.resolve(variant.contig)
    except AmbiguousContigError as exc:  # a naming problem of the whole table, never skipped
        raise GenomeInputError(source, f"variant {variant.label()}: {exc}") from None
    except ContigNameError as exc:
        raise SkippableVariantError(source, f"variant {variant.label()}: {exc}", "contig not in the genome") from None
    length = genome.contigs[index].length
    begin = variant.position - 1
    end = begin + len(variant.ref)
    if end > length:
        raise SkippableVariantError(source, f"variant {variant.label()}: position beyond contig end ({length:,} bp)",
                                    f"beyond contig end ({length} bp)")
    read = upper_bases(genome) if read is None else read
    longest = max(len(variant.ref), len(variant.alt))
    size = min(window, length)
    start, ref_seq = begin, ""
    if longest <= window:  # the window holds the reference allele: read it from there
        middle = begin + len(variant.ref) // 2 if centre is None else centre - 1
        start = min(max(middle - size // 2, end - size, 0), begin, length - size)
        ref_seq = read(index, start, start + size)
        actual = ref_seq[begin - start:end - start]
    else:
        actual = read(index, begin, end)
    if actual != variant.ref:
        raise SkippableVariantError(source, f"variant {variant.label()}: reference allele {variant.ref} does not "
                                            f"match the genome ({actual}) at {variant.contig}:{variant.position}",
                                    f"reference mismatch (genome has {actual})")
    if longest > window:
        # The window must hold each allele whole: a longer ref would be spliced out of range, and
        # an alt longer than the window would leave its windows with no flank in common.
        alleles = "ref and alt alleles" if len(variant.ref) == len(variant.alt) else (
            "ref allele" if len(variant.ref) > len(variant.alt) else "alt allele")
        raise GenomeInputError(source, f"variant {variant.label()}: its {alleles} of {longest} bases do not fit in "
                                       f"the scoring window of {window} bases (raise --window)")
    offset = begin - start
    alt_seq = ref_seq[:offset] + variant.alt + ref_seq[offset + len(variant.ref):]
    return start, ref_seq, alt_seq


def score_variants(model: InferenceModel | MoETransformer, genome: SequenceReader, variants: list[Variant],
                   window: int = 1024, source: str = "variants", batch_size: int | None = None, progress=None,
                   batch_tokens: int | None = None) -> list[dict[str, object]]:
    """One dict per variant: the inputs (contig, position, id, ref, alt; ``info``: INFO key -> text)
    plus window_start (0-based), logp_ref, logp_alt, llr (nats).
    ``progress`` (tqdm-like) advances by one per scored variant."""
    prepared = prepare_windows(genome, variants, window, source)
    return score_windows(model, variants, prepared, batch_size, progress, batch_tokens)


def prepare_windows(genome: SequenceReader, variants: list[Variant], window: int,
                    source: str = "variants") -> list[tuple[int, str, str]]:
    """Every variant's (window start, ref window, alt window): all are checked before any is scored."""
    return check_variants(genome, variants, window, source)[1]


def check_variants(genome: SequenceReader, variants: list[Variant], window: int, source: str = "variants",
                   skip: bool = False, centres: list[int] | None = None,
                   ) -> tuple[list[Variant], list[tuple[int, str, str]], list[tuple[Variant, str]]]:
    """(variants kept, their windows, (variant, reason) set aside). With ``skip`` false this is
    :func:`prepare_windows`: the first unscorable variant stops with one line. ``centres``: one
    1-based position per variant to centre its window on (:func:`variant_windows`)."""
    names = ContigNames(genome)
    # a codon's SNVs, or variants close together, share one reference window: read it once
    read = lru_cache(maxsize=64)(upper_bases(genome))
    kept: list[Variant] = []
    prepared: list[tuple[int, str, str]] = []
    skipped: list[tuple[Variant, str]] = []
    for k, variant in enumerate(variants):
        try:
            prepared.append(variant_windows(genome, variant, window, source, names,
                                            None if centres is None else centres[k], read))
        except SkippableVariantError as exc:
            if not skip:
                raise
            skipped.append((variant, exc.reason))
            continue
        kept.append(variant)
    return kept, prepared, skipped


def score_windows(model: InferenceModel | MoETransformer, variants: list[Variant],
                  prepared: list[tuple[int, str, str]], batch_size: int | None = None, progress=None,
                  batch_tokens: int | None = None) -> list[dict[str, object]]:
    """:func:`score_variants` for windows made by :func:`prepare_windows`.

    The ref and alt windows of all variants share forward passes of up to ``batch_tokens`` tokens
    (``batch_size`` caps the variants per pass); variants that share a reference window (other
    alleles at one site, the same ref allele) have it scored once. A substitution's alt window runs
    only from its first changed base on, continuing the reference window's cached keys and values
    (:mod:`biomoe.inference.shared_prefix`; bf16 and fp32). Every window is read from its
    start and summed over its own bases only (an indel's windows differ in length, and a batch pads
    its rows to the widest), so a variant's scores are those of its two windows scored alone."""
    tokenizer = NucleotideTokenizer()
    logp = np.zeros((len(variants), 2), dtype=np.float64)
    ref_rows: dict[tuple[str, int, str], int] = {}
    shared: list[tuple[int, int]] = []  # (variant, the variant whose reference window it reuses)
    model = InferenceModel.wrap(model)
    whole = range(len(variants))
    if continues_from_prefix(model):  # substitutions: the alt window continues the ref window's cache
        items, whole = _substitutions(tokenizer, prepared)

        def keep(j: int, logp_ref: float, logp_alt: float) -> None:
            logp[j] = (logp_ref, logp_alt)

        score_substitutions(model, items, keep, batch_tokens, 2 * batch_size if batch_size else None, progress)
        for item in items:  # an indel at the same site reuses the reference window's score
            start, ref_seq, _ = prepared[item.key]
            ref_rows.setdefault((variants[item.key].contig, start, ref_seq), item.key)

    def windows():
        for j in whole:
            (start, ref_seq, alt_seq), variant = prepared[j], variants[j]
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


def _substitutions(tokenizer: NucleotideTokenizer,
                   prepared: list[tuple[int, str, str]]) -> tuple[list[Substitution], list[int]]:
    """(the variants whose windows have one length and differ somewhere, as substitutions; the
    indices of the rest: indels, and alleles equal to the reference).

    Each distinct reference window is encoded once (a codon's nine SNVs share one) and an alt
    window is its reference's tokens with the changed bases patched in, all as one byte per
    token. Encoding two fresh int64 windows per variant instead would spend seconds on a genome's
    worth of SNVs, all of it before the first forward."""
    items, rest = [], []
    encoded: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # ref window -> (its bytes, its tokens)

    def as_bytes(seq: str) -> np.ndarray:
        return np.frombuffer(seq.encode("ascii", "replace"), dtype=np.uint8)

    for j, (_, ref_seq, alt_seq) in enumerate(prepared):
        if len(ref_seq) != len(alt_seq):
            rest.append(j)
            continue
        if ref_seq not in encoded:
            ref_bytes = as_bytes(ref_seq)
            encoded[ref_seq] = ref_bytes, tokenizer.encode(ref_bytes.tobytes()).astype(np.uint8)
        ref_bytes, ref_ids = encoded[ref_seq]
        alt_bytes = as_bytes(alt_seq)
        differ = np.flatnonzero(ref_bytes != alt_bytes)
        alt_tokens = tokenizer.encode(alt_bytes[differ].tobytes()).astype(np.uint8)
        changed = differ[alt_tokens != ref_ids[differ]]  # a change of case only is the same token
        if changed.size:
            alt_ids = ref_ids.copy()
            alt_ids[differ] = alt_tokens
            items.append(Substitution(j, ref_ids, alt_ids, int(changed[0])))
        else:
            rest.append(j)
    return items, rest


def _rows(variants: list[Variant], prepared: list[tuple[int, str, str]], logp: np.ndarray) -> list[dict[str, object]]:
    rows = []
    for (start, _, _), variant, (logp_ref, logp_alt) in zip(prepared, variants, logp):
        rows.append({"contig": variant.contig, "position": variant.position, "id": variant.id, "ref": variant.ref,
                     "alt": variant.alt, "window_start": start, "logp_ref": float(logp_ref),
                     "logp_alt": float(logp_alt), "llr": float(logp_alt - logp_ref), "info": dict(variant.info)})
    return rows
