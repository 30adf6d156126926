"""Variants of a VCF/BCF file, read with pysam (``pip install 'biomoe[vcf]'``), and variant effects
written as a VCF (plain text, no dependency).

Every ALT allele of a record is one variant, carrying the record's ID and any INFO fields asked
for. Substitutions and indels (REF and ALT of A/C/G/T, VCF-style with the base before an indel)
are scored; what the model cannot score as a sequence is set aside with the reason, never refused,
so a call set can be scored as it comes from a caller and what was left out can be looked up:

* symbolic alleles (``<DEL>``, ``<INS>``, ``<CN0>``): the allele's sequence is not written;
* ``*``, an allele deleted by an overlapping record: there is no sequence to put in its place;
* breakends (``G]chr2:100]``): a join with another locus, not a local change;
* alleles with N or another IUPAC code (R, Y, ...), on either side: the model reads A/C/G/T only,
  and the training loss masks everything else, so such a base has no likelihood to compare;
* records without ALT (``.``): nothing to compare the reference with.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO

from biomoe.errors import GenomeInputError
from biomoe.inference.score_variants import Variant

__all__ = ["EFFECT_FIELDS", "VCF_SUFFIXES", "check_effects_output", "is_vcf", "read_vcf", "unscorable_reason",
           "write_effects_vcf"]

VCF_SUFFIXES: tuple[str, ...] = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")
_BASES = frozenset("ACGT")


def is_vcf(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path).lower().endswith(VCF_SUFFIXES)


def unscorable_reason(ref: str, alt: str | None) -> str | None:
    """Why a REF/ALT pair (upper case; ``alt`` None for a record without ALT) cannot be scored as
    sequence, as the skipped list words it; None when it can (a substitution or an indel)."""
    if alt is None:
        return "no ALT allele"
    if alt.startswith("<") and alt.endswith(">"):
        return f"symbolic allele ({alt})"
    if alt == "*":
        return "spanning deletion (*: the allele is removed by an overlapping record)"
    if "[" in alt or "]" in alt:
        return f"breakend ({alt})"
    if not ref:
        return "no REF allele"
    for side, allele in (("REF", ref), ("ALT", alt)):
        others = sorted(set(allele) - _BASES)
        if others:
            return f"not A/C/G/T ({side} {allele} has {''.join(others)})"
    return None


def read_vcf(path: str | os.PathLike[str],
             info: Sequence[str] = ()) -> tuple[list[Variant], list[tuple[Variant, str]]]:
    """(the scorable variants of a VCF/BCF, one per ALT allele; the alleles set aside, each with
    its reason), both in file order. A record without ALT is set aside once, with ALT ``.``.

    Every variant carries the record's ID (``.`` when it has none) and the INFO fields ``info``
    as text: empty when the record lacks the field, ``true``/``false`` for flags, the allele's own
    value for per-ALT fields (``Number=A``), the reference's and the allele's for ``Number=R``,
    other lists comma-separated. A key the VCF header does not declare is an error."""
    try:
        import pysam  # optional dependency
    except ImportError:
        raise GenomeInputError(path, "reading VCF needs pysam: pip install 'biomoe[vcf]'") from None
    if not os.path.isfile(path):
        raise GenomeInputError(path, "no such file" if not os.path.exists(path) else "is not a file")
    keys = list(dict.fromkeys(info))
    variants: list[Variant] = []
    skipped: list[tuple[Variant, str]] = []
    verbosity = pysam.set_verbosity(0)  # htslib's own warnings would repeat our one-line errors
    try:
        with pysam.VariantFile(os.fspath(path)) as vcf:
            declared = vcf.header.info
            for record in vcf:
                if record.pos < 1:  # 0 is the VCF spec's telomere marker: no base to substitute
                    raise GenomeInputError(path, f"record {record.chrom}:{record.pos}: position must be >= 1 "
                                                 "(VCF positions are 1-based)")
                ref = (record.ref or "").upper()
                ident = record.id or "."
                for allele, written in enumerate(record.alts or (None,)):
                    alt = written.upper() if written is not None else None
                    reason = unscorable_reason(ref, alt)
                    if reason is None:
                        values = tuple((key, _info_text(record, declared, key, allele)) for key in keys)
                        variants.append(Variant(record.chrom, int(record.pos), ref, alt, ident, values))
                    else:  # listed as written: a breakend names its mate's contig in its own case
                        skipped.append((Variant(record.chrom, int(record.pos), record.ref or ".", written or ".",
                                                ident), reason))
            missing = [key for key in keys if key not in declared]  # also after records added some
            if missing:
                known = ", ".join(list(declared)[:10]) + (" ..." if len(declared) > 10 else "")
                raise GenomeInputError(path, f"--info: INFO field(s) {', '.join(missing)} not declared in the VCF "
                                             f"header (declared: {known or 'none'})")
    except NotImplementedError:  # htslib cannot seek in plain gzip (only in bgzip's blocks)
        raise GenomeInputError(path, "is gzip-compressed but not bgzipped: recompress it with "
                                     f"`gunzip -c {os.fspath(path)} | bgzip > OUT.vcf.gz`, or gunzip it") from None
    except (ValueError, OSError) as exc:
        if isinstance(exc, GenomeInputError):
            raise
        detail = " ".join(str(exc).split())[:200]
        raise GenomeInputError(path, f"cannot read as VCF/BCF ({detail})") from None
    finally:
        pysam.set_verbosity(verbosity)
    return variants, skipped


def _info_text(record, declared, key: str, allele: int) -> str:
    """One INFO field of a record, as the results table writes it (see :func:`read_vcf`)."""
    meta = declared.get(key) if key in declared else None
    if meta is not None and meta.type == "Flag":
        return "true" if key in record.info else "false"
    if key not in record.info:
        return ""
    value = record.info[key]
    if isinstance(value, tuple):
        number = meta.number if meta is not None else None
        if number == "A" and len(value) > allele:
            value = value[allele]
        elif number == "R" and len(value) > allele + 1:
            value = (value[0], value[allele + 1])
    if isinstance(value, tuple):
        return ",".join(_info_value(v) for v in value)
    return _info_value(value)


def _info_value(value) -> str:
    if value is None:
        return "."
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):  # htslib stores floats in 32 bits: 7 digits say all of it
        return f"{value:.7g}"
    return str(value)


EFFECT_FIELDS: tuple[tuple[str, str, str, str, str], ...] = (
    # (INFO ID, result column, Number, Type, Description)
    ("LLR", "llr", "A", "Float", "log p(alt window) - log p(ref window) under the model, in nats "
                                 "(biomoe score-variants; negative: the model finds the allele less likely)"),
    ("LOGP_REF", "logp_ref", "1", "Float", "log-likelihood of the reference window, in nats"),
    ("LOGP_ALT", "logp_alt", "A", "Float", "log-likelihood of the alternative window, in nats"),
    ("WINDOW_START", "window_start", "1", "Integer", "0-based start of the scored window on the contig"),
)
"""The INFO fields of an effects VCF: one per column of the results table."""


def check_effects_output(path: str | os.PathLike[str]) -> None:
    """An effects output named like a compressed VCF or a BCF is refused before any work: biomoe
    writes plain VCF text (``bgzip effects.vcf`` and ``bcftools view -Ob`` make the others)."""
    name = os.fspath(path).lower()
    if is_vcf(name) and not name.endswith(".vcf"):
        raise GenomeInputError(path, "score-variants writes plain VCF (--out effects.vcf) or TSV; compress it "
                                     "afterwards (bgzip effects.vcf, or bcftools view -Ob for BCF)")


def write_effects_vcf(handle: TextIO, rows: Iterable[Mapping[str, object]], info: Sequence[str],
                      contig_lengths: Mapping[str, int], reference: Sequence[str]) -> None:
    """The scored variants as VCF 4.2: one record per ALT allele, in contig order (first
    appearance) and by position, with the scores as INFO fields (:data:`EFFECT_FIELDS`) and the
    input's INFO fields asked for with ``--info`` copied as text. ``contig_lengths`` gives the
    ``##contig`` lines their length where the contig is known by that name."""
    rows = list(rows)
    order = {contig: i for i, contig in enumerate(dict.fromkeys(str(row["contig"]) for row in rows))}
    rows.sort(key=lambda row: (order[str(row["contig"])], int(row["position"])))
    handle.write("##fileformat=VCFv4.2\n##source=biomoe score-variants\n")
    if reference:
        handle.write(f"##reference={','.join(reference)}\n")
    for contig in order:
        length = contig_lengths.get(contig)
        handle.write(f"##contig=<ID={contig}{f',length={length}' if length else ''}>\n")
    for key, _, number, kind, description in EFFECT_FIELDS:
        handle.write(f'##INFO=<ID={key},Number={number},Type={kind},Description="{description}">\n')
    copied = [key for key in info if key not in {field[0] for field in EFFECT_FIELDS}]
    for key in copied:
        handle.write(f'##INFO=<ID={key},Number=.,Type=String,Description="{key} of the input VCF, as text">\n')
    handle.write("#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n")
    for row in rows:
        fields = [f"{key}={_number(row[column])}" for key, column, *_ in EFFECT_FIELDS]
        given = row.get("info") or {}
        fields += [f"{key}={_escaped(str(given[key]))}" for key in copied if given.get(key) not in (None, "")]
        handle.write("\t".join([str(row["contig"]), str(row["position"]), str(row["id"] or "."), str(row["ref"]),
                                str(row["alt"]), ".", ".", ";".join(fields)]) + "\n")


def _number(value: object) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def _escaped(text: str) -> str:
    """An INFO value as VCF allows it: no spaces, semicolons or equals signs (percent-encoded)."""
    for char, code in ((" ", "%20"), (";", "%3B"), ("=", "%3D"), ("\t", "%09")):
        text = text.replace(char, code)
    return text
