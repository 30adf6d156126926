"""The UCSC ``.2bit`` format: packing bases into it and reading windows back through a memory map.

Why this format: it is the community's compact genome format (``twoBitToFa``, ``twoBitInfo``,
py2bit, twobitreader, the genome browser read it), it stores 2 bits per base plus N runs and
soft-mask (lowercase) runs, and a record's packed bases sit at a known offset, so a window is a
slice of a memory-mapped file: nothing is loaded, and every DataLoader worker maps the file itself.

Layout (all integers little-endian; https://genome.ucsc.edu/FAQ/FAQformat.html#format7):
a 16-byte header (signature ``0x1A412743``, version, record count, reserved), an index of
(name length, name, record offset) with 32-bit offsets (version 0) or 64-bit ones (version 1,
for files past 4 GiB), then each record: ``dnaSize``, the N-block count, starts and sizes, the
mask-block count, starts and sizes, a reserved word, and the bases packed four to a byte
(T=0, C=1, A=2, G=3, first base in the high bits). Bases in N blocks are packed as T.

The format has no IUPAC ambiguity codes other than N: :func:`encode_record` reports them
(position and letter) so that the store can keep them beside the file and put them back exactly;
inside the ``.2bit`` file they read as N, as ``faToTwoBit`` writes them.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from biomoe.errors import GenomeInputError

__all__ = ["SIGNATURE", "EncodedRecord", "Exceptions", "RecordEncoder", "TwoBitFile", "iter_pieces", "write_twobit"]

SIGNATURE = 0x1A412743
_MAX_NAME = 255
_U32 = 1 << 32

# byte -> 2-bit code: T=0 C=1 A=2 G=3, anything else 0 (inside an N block, or an IUPAC code kept aside)
_CODE = np.zeros(256, dtype=np.uint8)
for _letter, _code in zip("TCAG", range(4)):
    _CODE[ord(_letter)] = _CODE[ord(_letter.lower())] = _code
_ACGT = np.zeros(256, dtype=bool)
_ACGT[np.frombuffer(b"ACGTacgt", dtype=np.uint8)] = True
_N = np.zeros(256, dtype=bool)
_N[np.frombuffer(b"Nn", dtype=np.uint8)] = True
# packed byte -> its four bases, upper case
_UNPACK = np.array([[b"TCAG"[(byte >> shift) & 3] for shift in (6, 4, 2, 0)] for byte in range(256)], dtype=np.uint8)


def _runs(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of True in a boolean array."""
    edges = np.flatnonzero(np.diff(np.concatenate(([False], flags, [False])).view(np.int8)))
    return edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)


class _RunList:
    """Runs (start, end) collected piece by piece; a run that reaches a piece's end and one that
    starts the next piece are one run."""

    def __init__(self) -> None:
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self._last_end = -1

    def add(self, flags: np.ndarray, offset: int) -> None:
        starts, ends = _runs(flags)
        if not len(starts):
            return
        starts, ends = starts + offset, ends + offset
        if starts[0] == self._last_end:  # continues the previous piece's last run
            self.ends[-1][-1] = ends[0]
            starts, ends = starts[1:], ends[1:]
        if len(starts):
            self.starts.append(starts)
            self.ends.append(ends.copy())
        self._last_end = int(self.ends[-1][-1])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, sizes) as uint32, as the format stores them."""
        if not self.starts:
            return np.zeros(0, dtype="<u4"), np.zeros(0, dtype="<u4")
        starts, ends = np.concatenate(self.starts), np.concatenate(self.ends)
        return starts.astype("<u4"), (ends - starts).astype("<u4")


@dataclass
class Exceptions:
    """IUPAC ambiguity codes other than N in one record: positions and upper-case letters."""

    positions: np.ndarray
    letters: bytes

    def runs(self) -> list[list[int | str]]:
        """``[[start, "RY..."], ...]``: consecutive positions as one run (compact in JSON)."""
        out: list[list[int | str]] = []
        if not len(self.positions):
            return out
        breaks = np.flatnonzero(np.diff(self.positions) != 1) + 1
        bounds = np.concatenate(([0], breaks, [len(self.positions)]))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            out.append([int(self.positions[lo]), self.letters[lo:hi].decode("ascii")])
        return out

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, str]]) -> Exceptions:
        positions, letters = [], []
        for start, text in runs:
            positions.append(np.arange(int(start), int(start) + len(text), dtype=np.int64))
            letters.append(text.upper().encode("ascii"))
        if not positions:
            return cls(np.zeros(0, dtype=np.int64), b"")
        return cls(np.concatenate(positions), b"".join(letters))


@dataclass
class EncodedRecord:
    """One sequence in ``.2bit`` form, ready to be written."""

    name: str
    length: int
    n_starts: np.ndarray
    n_sizes: np.ndarray
    mask_starts: np.ndarray
    mask_sizes: np.ndarray
    packed: bytes
    exceptions: Exceptions

    @property
    def size(self) -> int:
        """Bytes of the record in the file."""
        return 16 + 4 * (len(self.n_starts) + len(self.n_sizes) + len(self.mask_starts) + len(self.mask_sizes)) \
            + len(self.packed)


class RecordEncoder:
    """Packs one sequence fed in pieces (so a chromosome never has to be in memory as text).

    Every piece but the last must hold a multiple of 4 bases, so that bytes are never split.
    """

    def __init__(self, name: str) -> None:
        encoded = name.encode("ascii", "replace")
        if not encoded or len(encoded) > _MAX_NAME or any(c <= 32 for c in encoded):
            raise ValueError(f"sequence name {name!r} cannot be a .2bit record name (1-255 printable characters)")
        self.name = name
        self.length = 0
        self._n = _RunList()
        self._mask = _RunList()
        self._packed: list[bytes] = []
        self._positions: list[np.ndarray] = []
        self._letters: list[bytes] = []
        self._ragged = False

    def add(self, bases: str | bytes) -> None:
        if self._ragged:
            raise ValueError("only the last piece of a sequence may hold a number of bases not a multiple of 4")
        data = np.frombuffer(bases.encode("ascii") if isinstance(bases, str) else bases, dtype=np.uint8)
        offset = self.length
        acgt = _ACGT[data]
        self._n.add(~acgt, offset)
        self._mask.add(data >= ord("a"), offset)
        other = np.flatnonzero(~acgt & ~_N[data])
        if len(other):
            self._positions.append(other + offset)
            self._letters.append((data[other] & 0xDF).tobytes())  # upper case; the mask keeps the case
        codes = _CODE[data]
        if len(codes) % 4:
            self._ragged = True
            codes = np.concatenate((codes, np.zeros(4 - len(codes) % 4, dtype=np.uint8)))
        quads = codes.reshape(-1, 4)
        self._packed.append(((quads[:, 0] << 6) | (quads[:, 1] << 4) | (quads[:, 2] << 2) | quads[:, 3])
                            .astype(np.uint8).tobytes())
        self.length += len(data)

    def finish(self) -> EncodedRecord:
        if self.length >= _U32:
            raise ValueError(f"sequence {self.name!r} has {self.length:,} bases; .2bit holds at most {_U32 - 1:,}")
        n_starts, n_sizes = self._n.arrays()
        mask_starts, mask_sizes = self._mask.arrays()
        exceptions = Exceptions(np.concatenate(self._positions) if self._positions else np.zeros(0, dtype=np.int64),
                                b"".join(self._letters))
        return EncodedRecord(self.name, self.length, n_starts, n_sizes, mask_starts, mask_sizes,
                             b"".join(self._packed), exceptions)


def write_twobit(handle: BinaryIO, records: list[EncodedRecord]) -> int:
    """Write a complete ``.2bit`` file of ``records`` to ``handle``; returns its size in bytes.

    Version 0 (32-bit offsets, what every tool reads) unless the file passes 4 GiB."""
    names = [r.name.encode("ascii", "replace") for r in records]
    index_size = sum(1 + len(n) for n in names)
    for version, width in ((0, 4), (1, 8)):
        offset = 16 + index_size + width * len(records)
        offsets = []
        for record in records:
            offsets.append(offset)
            offset += record.size
        if version == 1 or offset < _U32:
            break
    handle.write(struct.pack("<4I", SIGNATURE, version, len(records), 0))
    for name, at in zip(names, offsets):
        handle.write(struct.pack("<B", len(name)) + name + struct.pack("<Q" if width == 8 else "<I", at))
    for record in records:
        handle.write(struct.pack("<2I", record.length, len(record.n_starts)))
        handle.write(record.n_starts.tobytes() + record.n_sizes.tobytes())
        handle.write(struct.pack("<I", len(record.mask_starts)))
        handle.write(record.mask_starts.tobytes() + record.mask_sizes.tobytes())
        handle.write(struct.pack("<I", 0))
        handle.write(record.packed)
    return offset


@dataclass
class _Record:
    length: int
    n_starts: np.ndarray
    n_ends: np.ndarray
    mask_starts: np.ndarray
    mask_ends: np.ndarray
    packed_at: int


class TwoBitFile:
    """Random access to the records of one ``.2bit`` file through a read-only memory map.

    The map is made on first use in each process (a file handle must not be shared across
    ``fork``), so an instance can be pickled to DataLoader workers; records are parsed on first
    use too. Problems with the file are one :class:`GenomeInputError` naming it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._map: mmap.mmap | None = None
        self._bytes: np.ndarray | None = None
        self._pid = -1
        self._records: dict[int, _Record] = {}
        with open(self.path, "rb") as handle:
            head = handle.read(16)
            if len(head) < 16:
                raise GenomeInputError(self.path, "is not a .2bit file (shorter than its header)")
            self._order = "<" if struct.unpack("<I", head[:4])[0] == SIGNATURE else ">"
            signature, version, count, _ = struct.unpack(self._order + "4I", head)
            if signature != SIGNATURE or version not in (0, 1):
                raise GenomeInputError(self.path, "is not a .2bit file (wrong signature or version)")
            width = 8 if version == 1 else 4
            self.names: list[str] = []
            self.offsets: list[int] = []
            for _ in range(count):
                size = handle.read(1)
                name = handle.read(size[0]) if size else b""
                at = handle.read(width)
                if not size or len(name) != size[0] or len(at) != width:
                    raise GenomeInputError(self.path, "is cut short (its index is incomplete)")
                self.names.append(name.decode("ascii", "replace"))
                self.offsets.append(struct.unpack(self._order + ("Q" if width == 8 else "I"), at)[0])

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.update(_map=None, _bytes=None, _pid=-1, _records={})
        return state

    def _data(self) -> np.ndarray:
        if self._bytes is None or self._pid != os.getpid():
            with open(self.path, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._bytes = np.frombuffer(self._map, dtype=np.uint8)
            self._pid = os.getpid()
            self._records = {}
        return self._bytes

    def _ints(self, data: np.ndarray, at: int, count: int) -> np.ndarray:
        if at + 4 * count > len(data):
            raise GenomeInputError(self.path, "is cut short (a record runs past the end of the file)")
        return data[at:at + 4 * count].view(self._order + "u4").astype(np.int64)

    def record(self, index: int) -> _Record:
        data = self._data()
        found = self._records.get(index)
        if found is not None:
            return found
        at = self.offsets[index]
        length, n_count = self._ints(data, at, 2)
        n_blocks = self._ints(data, at + 8, 2 * int(n_count))
        at += 8 + 8 * int(n_count)
        mask_count = int(self._ints(data, at, 1)[0])
        mask_blocks = self._ints(data, at + 4, 2 * mask_count)
        packed_at = at + 4 + 8 * mask_count + 4
        if packed_at + (int(length) + 3) // 4 > len(data):
            raise GenomeInputError(self.path, f"is cut short (record {self.names[index]!r} runs past the end)")
        n_count = int(n_count)
        found = _Record(int(length), n_blocks[:n_count], n_blocks[:n_count] + n_blocks[n_count:],
                        mask_blocks[:mask_count], mask_blocks[:mask_count] + mask_blocks[mask_count:], packed_at)
        self._records[index] = found
        return found

    def length(self, index: int) -> int:
        return self.record(index).length

    def fetch_bytes(self, index: int, start: int, end: int) -> np.ndarray:
        """Bases ``[start, end)`` of record ``index`` as ASCII (uint8), N and lowercase restored."""
        record = self.record(index)
        data = self._data()
        first, last = start >> 2, (end + 3) >> 2
        out = _UNPACK[data[record.packed_at + first:record.packed_at + last]].reshape(-1)
        out = out[start - 4 * first:end - 4 * first].copy()
        _paint(out, record.n_starts, record.n_ends, start, end, lambda view: view.fill(ord("N")))
        return out

    def apply_mask(self, index: int, out: np.ndarray, start: int, end: int) -> None:
        """Lower-case the soft-masked bases of ``out`` (bases ``[start, end)`` of record ``index``)."""
        record = self.record(index)
        lower_case(out, record.mask_starts, record.mask_ends, start, end)

    def fetch(self, index: int, start: int, end: int) -> str:
        out = self.fetch_bytes(index, start, end)
        self.apply_mask(index, out, start, end)
        return out.tobytes().decode("ascii")

    def close(self) -> None:
        self._bytes = None
        self._records = {}
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a caller still holds a view: the map closes when it is dropped
                pass
        self._map = None


def lower_case(out: np.ndarray, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> None:
    """Lower-case the bases of ``out`` (ASCII bases ``[lo, hi)``) inside the sorted runs ``[starts, ends)``."""
    _paint(out, starts, ends, lo, hi, lambda view: np.bitwise_or(view, 0x20, out=view))


def _paint(out: np.ndarray, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int, action) -> None:
    """Apply ``action`` to the parts of ``out`` (covering ``[lo, hi)``) inside the sorted blocks."""
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    if first >= last:
        return
    if last - first <= 8:
        for s, e in zip(starts[first:last].tolist(), ends[first:last].tolist()):
            action(out[max(s, lo) - lo:min(e, hi) - lo])
        return
    inside = np.zeros(len(out) + 1, dtype=np.int32)
    np.add.at(inside, np.clip(starts[first:last], lo, hi) - lo, 1)
    np.add.at(inside, np.clip(ends[first:last], lo, hi) - lo, -1)
    flags = np.cumsum(inside[:-1]) > 0
    chosen = out[flags]
    action(chosen)
    out[flags] = chosen


def iter_pieces(length: int, piece: int) -> Iterator[tuple[int, int]]:
    """(start, end) pieces of a sequence, each a multiple of 4 bases but the last."""
    step = max(4, piece - piece % 4)
    for start in range(0, length, step):
        yield start, min(length, start + step)
