"""Coding vs non-coding bases from a GFF3 annotation (``CDS`` features), for analysis.

Why our own twenty lines: biopython has no GFF reader (BCBio-gff is a separate package), and the
notebook needs only one thing from an annotation: which bases of a contig lie in a coding sequence.
Errors follow the project's rule: one line naming the file, the line and the problem.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

from biomoe.errors import GenomeInputError

__all__ = ["coding_mask", "read_cds_intervals"]


def _seqid_matches(seqid: str, contig: str) -> bool:
    """GFF seqids are accessions (``NC_001416.1``); older NCBI FASTA headers wrap them
    (``gi|9626243|ref|NC_001416.1|``), so a seqid that is one ``|`` field of the name matches."""
    return seqid == contig or seqid in contig.split("|")


def read_cds_intervals(path: str | os.PathLike[str]) -> dict[str, list[tuple[int, int]]]:
    """``seqid -> [(start, end), ...]`` of every ``CDS`` feature, 0-based half-open (GFF's are
    1-based inclusive). Plain or gzip files; comment and directive lines are skipped, and a
    ``##FASTA`` section ends the features."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        handle = gzip.open(path, "rt", encoding="utf-8") if gzipped else open(path, encoding="utf-8")
    except OSError as exc:
        raise GenomeInputError(path, f"cannot read annotation ({exc.strerror or exc})") from None
    intervals: dict[str, list[tuple[int, int]]] = {}
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                if line.startswith("##FASTA"):
                    break
                if not line.strip() or line.startswith("#"):
                    continue
                fields = line.rstrip("\n\r").split("\t")
                if len(fields) < 8:
                    raise GenomeInputError(path, f"line {number}: expected 9 tab-separated GFF3 columns, "
                                                 f"got {len(fields)}")
                if fields[2] != "CDS":
                    continue
                try:
                    start, end = int(fields[3]), int(fields[4])
                except ValueError:
                    raise GenomeInputError(path, f"line {number}: start/end {fields[3]!r}/{fields[4]!r} "
                                                 "are not integers") from None
                if not 1 <= start <= end:
                    raise GenomeInputError(path, f"line {number}: need 1 <= start <= end, got {start}..{end}")
                intervals.setdefault(fields[0], []).append((start - 1, end))
        except UnicodeDecodeError:
            raise GenomeInputError(path, "is not a text GFF3 file") from None
    return intervals


def coding_mask(path: str | os.PathLike[str], contig: str, length: int) -> np.ndarray:
    """Boolean per base of ``contig`` (``length`` bases): True inside any ``CDS`` feature."""
    intervals = read_cds_intervals(path)
    matching = [seqid for seqid in intervals if _seqid_matches(seqid, contig)]
    if not matching:
        known = ", ".join(sorted(intervals)[:10]) or "none"
        raise GenomeInputError(path, f"no CDS features for contig {contig!r} (seqids with CDS: {known})")
    mask = np.zeros(length, dtype=bool)
    for seqid in matching:
        for start, end in intervals[seqid]:
            if end > length:
                raise GenomeInputError(path, f"CDS {start + 1}..{end} on {seqid} runs past the contig's "
                                             f"{length:,} bases (annotation of another assembly?)")
            mask[start:end] = True
    return mask
