"""Variants of a VCF/BCF file, read with pysam (``pip install 'biomoe[vcf]'``).

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
from collections.abc import Sequence

from biomoe.errors import GenomeInputError
from biomoe.inference.score_variants import Variant

__all__ = ["VCF_SUFFIXES", "is_vcf", "read_vcf", "unscorable_reason"]

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
