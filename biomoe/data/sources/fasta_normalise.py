"""A plain, evenly wrapped copy of a FASTA file that pyfaidx cannot index as it is.

pyfaidx can index plain FASTA and bgzip (BGZF), but not plain gzip, and it rejects CRLF line
endings, blank lines and ragged line widths. Such files are decompressed/rewritten *once* into a
plain FASTA in the cache directory (written to a temporary file, then ``os.replace``'d so a crash
or a concurrent process never sees a half-written file). Sequence content, including lowercase
soft-masking, is preserved exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from biomoe.data.sources.fasta_compression import iter_chunks
from biomoe.files import atomic_write

__all__ = ["write_normalised"]

_WRAP = 80


def write_normalised(src: Path, compression: str, dest: Path) -> None:
    """Rewrite ``src`` as plain FASTA (LF endings, 80 bases per line), atomically."""
    with atomic_write(dest, "wb") as out:
        buf = bytearray()
        carry = b""
        for chunk in iter_chunks(src, compression):
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                _emit_line(line, buf, out)
        if carry:
            _emit_line(carry, buf, out)
        if buf:
            out.write(bytes(buf) + b"\n")


def _emit_line(line: bytes, buf: bytearray, out: BinaryIO) -> None:
    line = line.rstrip(b"\r")
    if line.startswith(b">"):
        if buf:
            out.write(bytes(buf) + b"\n")
            buf.clear()
        out.write(line.strip() + b"\n")
        return
    buf += line.strip()
    full = len(buf) - len(buf) % _WRAP
    if full:
        view = bytes(buf[:full])
        out.write(b"".join(view[i : i + _WRAP] + b"\n" for i in range(0, full, _WRAP)))
        del buf[:full]
