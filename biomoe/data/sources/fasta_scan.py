"""The validating scan: one streaming pass over a FASTA file that checks it and lists its records.

Users hand over all sorts of FASTA (Windows line endings, soft-masked lowercase, typos, a protein
file, FASTQ): every problem must surface as a one-line :class:`~biomoe.errors.GenomeInputError`
naming the file, *before* a training job starts, instead of as a pyfaidx traceback an hour in.
The scan reads 1 MiB chunks and finds bad characters with ``bytes.translate`` (in C, not a
Python loop per base); it records every contig's name and length, where a ``.fai`` must
point for the file as it is, and whether pyfaidx can index the file without a rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biomoe.data.sources.fasta_compression import check_bgzf_eof, iter_chunks, sniff_compression
from biomoe.errors import GenomeInputError

__all__ = ["FileScan", "listed_names", "scan_fasta"]

_IUPAC = b"ACGTNRYSWKMBDHV"
_VALID = _IUPAC + _IUPAC.lower()
_VALID_LUT = np.zeros(256, dtype=bool)
_VALID_LUT[np.frombuffer(_VALID, dtype=np.uint8)] = True
# One-letter amino-acid codes (and X, *, the stop) that no nucleotide code uses: a line of
# letters holding them is a protein sequence given where DNA is read.
_PROTEIN_ONLY = frozenset(b"EFILPQXZJO*efilpqxzjo")
_PROTEIN_LETTERS = frozenset(b"ACDEFGHIKLMNPQRSTVWYXBZJOU*acdefghiklmnpqrstvwyxbzjou")


def _protein_hint(piece: bytes) -> str:
    """``; it looks like a protein ...`` when the line is amino-acid letters, a tenth of them or more
    ones no nucleotide code uses; else empty (a stray character in DNA gets no such guess)."""
    letters = set(piece)
    only = sum(piece.count(bytes([code])) for code in letters & _PROTEIN_ONLY)
    # in proteins E, F, I, L, P and Q are about a third of the residues; one stray letter is a typo
    if not letters <= _PROTEIN_LETTERS or len(letters & _PROTEIN_ONLY) < 2 or only < 0.1 * len(piece):
        return ""
    return ("; this looks like a protein (amino-acid) sequence: biomoe reads nucleotide FASTA "
            "(A, C, G, T and IUPAC codes such as N)")


@dataclass
class FileScan:
    """What the validating scan learned about one file (cached as JSON)."""

    compression: str  # "none", "gzip" or "bgzf"
    canonical: bool  # True if pyfaidx can index the file as it is
    records: list[tuple[str, int]] = field(default_factory=list)
    # Per record, where a ``.fai`` must point for this file as it is: (offset of the first base,
    # bases per line, bytes per line). Used to tell a stale index whose lengths still agree.
    layout: list[tuple[int, int, int]] = field(default_factory=list)
    # Records with a header and no sequence (an assembler's or a download's leftovers): not contigs.
    empty: list[str] = field(default_factory=list)


class _Scanner:
    """Streaming FASTA validator: a small state machine fed with byte chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[tuple[str, int]] = []
        self.canonical = True
        self.seen_header = False
        self.at_line_start = True
        self.in_header = False
        self.header = bytearray()
        self.line_no = 1
        self.name = ""
        self.length = 0
        self.line_len = 0  # length of the (possibly partial) current sequence line
        self.width = 0  # first line width of the current record
        self.short_line_seen = False
        self.pos = 0  # bytes (decompressed) consumed before the current piece
        self.offset = 0  # byte offset of the current record's first base
        self.line_bytes = 0  # bytes per line of the current record's first line (with newline)
        self.layout: list[tuple[int, int, int]] = []
        self.empty: list[str] = []
        # A CR that ends a chunk ends its line only if an LF follows, or if the file ends there and
        # its other lines end in CRLF (a Windows file whose last line lost its LF); a file of CRs and
        # no LFs at all has old Mac (CR-only) line endings.
        self.crlf = False  # some line ended in CRLF
        self.held_cr = False  # the last chunk ended in a CR, held back from the sequence line

    def fail(self, problem: str) -> GenomeInputError:
        return GenomeInputError(self.path, problem)

    def feed(self, chunk: bytes, first: bool) -> None:
        if first:
            self._check_first_chunk(chunk)
        if self.held_cr:
            self.held_cr = False
            if not chunk.startswith(b"\n"):
                raise self._cr_error()
            self.crlf = True
            self.canonical = False
        pieces = chunk.split(b"\n")
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            complete = i < last
            end = self.pos + len(piece) + complete
            if complete and piece.endswith(b"\r"):
                self.crlf = True
            if self.at_line_start and piece[:1] == b">":
                self.in_header = True
            if self.in_header:
                self.header += piece
                if complete:
                    self._start_record(end)
            elif not complete and piece.endswith(b"\r") and self.seen_header:
                self.held_cr = True
                self._sequence_piece(piece[:-1], complete)
            else:
                self._sequence_piece(piece, complete)
            self.pos = end
            if complete or piece:  # a chunk ending in "\n" leaves an empty last piece: still at a line start
                self.at_line_start = complete
            if complete:
                self.line_no += 1

    def _check_first_chunk(self, chunk: bytes) -> None:
        if chunk.startswith(b"\xef\xbb\xbf"):
            raise self.fail("starts with a UTF-8 byte-order mark (BOM); save it without one (plain ASCII FASTA)")
        head = chunk[:4096]
        non_text = head.translate(None, bytes(range(32, 127)) + b"\t\r\n\x0b\x0c")
        if b"\x00" in head or len(non_text) > len(head) // 10:
            raise self.fail("not a FASTA file (binary content)")
        stripped = chunk.lstrip()
        if stripped.startswith(b"@"):
            raise self.fail("looks like FASTQ (starts with '@'); a FASTA file is needed")
        if stripped and not stripped.startswith(b">"):
            raise self.fail("not a FASTA file (first line does not start with '>')")

    def _cr_error(self) -> GenomeInputError:
        return self.fail(
            f"line {self.line_no:,} contains a carriage return (CR) that does not end the line: "
            "old Mac (CR-only) line endings? Convert them to LF, e.g. with: tr '\\r' '\\n'"
        )

    def _start_record(self, offset: int) -> None:
        self._finish_record()
        raw = bytes(self.header[1:]).rstrip(b"\r")
        self.header.clear()
        self.in_header = False
        if b"\r" in raw:
            raise self._cr_error()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(
                f"record header on line {self.line_no:,} is not valid UTF-8 text "
                f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 2})"
            ) from None
        if text != text.strip():
            self.canonical = False
        words = text.split()
        if not words:
            raise self.fail(f"record header on line {self.line_no:,} has no name")
        self.seen_header = True
        self.name = words[0]
        self.offset = offset
        self.length = self.width = self.line_len = self.line_bytes = 0
        self.short_line_seen = False

    def _sequence_piece(self, piece: bytes, complete: bool) -> None:
        if complete and piece.endswith(b"\r"):
            piece = piece[:-1]
            self.canonical = False
        if piece:
            if not self.seen_header:
                raise self.fail("not a FASTA file (sequence before the first '>' header)")
            bad = piece.translate(None, _VALID)
            if bad:
                if b"\r" in bad:
                    raise self._cr_error()
                idx = int(np.argmin(_VALID_LUT[np.frombuffer(piece, dtype=np.uint8)]))
                char = chr(piece[idx])
                shown = repr(char) if char.isprintable() else f"0x{piece[idx]:02x}"
                raise self.fail(
                    f"contig '{self.name}' has character {shown} outside IUPAC at position "
                    f"{self.length + idx + 1:,} (line {self.line_no:,}){_protein_hint(piece)}"
                )
            self.length += len(piece)
            self.line_len += len(piece)
        if complete:
            self._end_line(terminated=True)

    def _end_line(self, terminated: bool) -> None:
        n = self.line_len
        self.line_len = 0
        if n == 0:
            self.canonical = False  # blank line: pyfaidx rejects them
            return
        if self.width == 0:
            self.width = n
            self.line_bytes = n + terminated  # as pyfaidx/samtools write it
        elif self.short_line_seen or n > self.width:
            self.canonical = False
        if n < self.width:
            self.short_line_seen = True

    def _finish_record(self) -> None:
        if not self.seen_header:
            return
        if self.length == 0:
            self.empty.append(self.name)  # skipped, with a warning naming it (see fasta_prepare)
            return
        self.records.append((self.name, self.length))
        self.layout.append((self.offset, self.width, self.line_bytes))

    def close(self) -> list[tuple[str, int]]:
        if self.held_cr:  # the file ends in a CR
            if not self.crlf:
                raise self._cr_error()
            self.canonical = False  # the last line's CRLF without its LF: pyfaidx would read the CR as a base
        if self.in_header:  # header on the last line without a newline
            self._start_record(self.pos)
        elif self.line_len:
            self._end_line(terminated=False)
        self._finish_record()
        if not self.records:
            if self.empty:
                verb = "is" if len(self.empty) == 1 else "are"
                raise self.fail(f"no record has sequence ({listed_names(self.empty)} {verb} headers only)")
            raise self.fail("file is empty (no FASTA records)")
        seen: set[str] = set()
        for name in [name for name, _ in self.records] + self.empty:
            if name in seen:
                raise self.fail(f"duplicate contig name '{name}'")
            seen.add(name)
        return self.records


def scan_fasta(path: Path) -> FileScan:
    """Validate one FASTA file in a single streaming pass and list its records.

    Raises GenomeInputError for: empty files, binary/FASTQ/non-FASTA text, headers
    without a name, files whose records all lack sequence, duplicate names within the file, characters
    outside the IUPAC nucleotide codes (with contig and 1-based position) and corrupted
    gzip streams. CRLF line endings, blank lines and lowercase are accepted; a record with no
    sequence is left out of ``records`` and listed in ``empty``.
    """
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise GenomeInputError(path, "file is empty")
    except PermissionError:
        raise GenomeInputError(path, "permission denied (not readable)") from None
    compression = sniff_compression(path)
    if compression == "bgzf":
        check_bgzf_eof(path)
    scanner = _Scanner(path)
    first = True
    for chunk in iter_chunks(path, compression):
        scanner.feed(chunk, first)
        first = False
    if first:
        raise GenomeInputError(path, "file is empty (no data after decompression)")
    records = scanner.close()
    return FileScan(compression=compression, canonical=scanner.canonical and compression != "gzip", records=records,
                    layout=scanner.layout, empty=scanner.empty)


def listed_names(names: list[str], shown: int = 3) -> str:
    """``'a', 'b', 'c' (+2 more)``: a list of names short enough for one line."""
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(f"'{n}'" for n in names[:shown]) + more
