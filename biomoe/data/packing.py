"""Cutting regions into pieces and packing pieces into rows of a fixed length.

Both are pure functions of their arguments (no RNG): the same genome and settings always give the
same table, so a resumed run reads the rows the uninterrupted run would have read. Row *order* is
the sampler's business (seeded per epoch), not the packer's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biomoe.data.sources.reader import Region

__all__ = ["PackedTable", "cut_pieces", "pack_rows"]


def cut_pieces(regions: Sequence[Region], seq_length: int, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(contig, start, end) of every piece of ``regions``, as three int64 arrays.

    A piece starts every ``stride`` bases of a region and is at most ``seq_length`` long; pieces
    that would run past the region's end are cut there and kept. With ``stride == seq_length``
    (the default) the pieces tile every region exactly: a short record is one whole piece, a long
    contig is cut into full pieces and its end. With a smaller stride the pieces overlap, but not
    evenly: the first ``stride`` bases of a region are in one piece, the next ``stride`` in two,
    and so on through its first ``seq_length`` bases; from there on every base is in
    ``seq_length // stride`` or ``ceil(seq_length / stride)`` pieces (exactly ``seq_length / stride``
    when ``stride`` divides ``seq_length``), the region's last bases too, since the pieces cut at
    its end are kept.
    """
    contigs, starts, ends = [], [], []
    for contig, lo, hi in regions:
        if hi <= lo:
            continue
        begin = np.arange(lo, hi, stride, dtype=np.int64)
        starts.append(begin)
        ends.append(np.minimum(begin + seq_length, hi))
        contigs.append(np.full(begin.size, contig, dtype=np.int64))
    if not starts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    return np.concatenate(contigs), np.concatenate(starts), np.concatenate(ends)


class _Counts:
    """How many items of each size 1..capacity remain, with "largest size <= s" in O(log capacity)
    (a Fenwick tree over the size counts)."""

    def __init__(self, counts: np.ndarray) -> None:
        self.size = len(counts) - 1  # counts[0] is unused (no item is empty)
        tree = [0] * (self.size + 1)
        for s in range(1, self.size + 1):
            tree[s] += int(counts[s])
            parent = s + (s & -s)
            if parent <= self.size:
                tree[parent] += tree[s]
        self.tree = tree
        self.top = 1 << self.size.bit_length()

    def remove(self, s: int) -> None:
        tree, n = self.tree, self.size
        while s <= n:
            tree[s] -= 1
            s += s & -s

    def largest_at_most(self, limit: int) -> int:
        """The largest size <= ``limit`` with an item left, 0 if none."""
        tree = self.tree
        k, s = 0, min(limit, self.size)
        while s > 0:  # k = number of items of size <= limit
            k += tree[s]
            s -= s & -s
        if k == 0:
            return 0
        pos, step = 0, self.top  # smallest size whose prefix count reaches k
        while step:
            nxt = pos + step
            if nxt <= self.size and tree[nxt] < k:
                pos = nxt
                k -= tree[nxt]
            step >>= 1
        return pos + 1


def _pack_group(lengths: np.ndarray, items: np.ndarray, capacity: int) -> list[np.ndarray]:
    """Rows (arrays of item indices) for ``items``: full-length items alone, in their order, then
    every other row opened with the longest item left and filled with the longest item that still
    fits until none does (best-fit-decreasing, filled row by row)."""
    sizes = lengths[items]
    rows = [items[i:i + 1] for i in np.flatnonzero(sizes >= capacity)]
    rest = items[sizes < capacity]
    if rest.size == 0:
        return rows
    by_size = rest[np.argsort(lengths[rest], kind="stable")]  # within a size, table order
    counts = np.bincount(lengths[rest], minlength=capacity)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))  # next unused item of each size in by_size
    left = _Counts(counts)
    remaining = int(rest.size)
    next_of = first.tolist()
    while remaining:
        free, row = capacity, []
        while True:
            s = left.largest_at_most(free)
            if s == 0:
                break
            row.append(int(by_size[next_of[s]]))
            next_of[s] += 1
            left.remove(s)
            remaining -= 1
            free -= s
        rows.append(np.asarray(row, dtype=np.int64))
    return rows


class PackedTable:
    """Which pieces each row holds: ``pieces[offsets[r]:offsets[r + 1]]`` are row ``r``'s piece
    indices, in the order they are laid out."""

    def __init__(self, rows: list[np.ndarray]) -> None:
        sizes = np.fromiter((r.size for r in rows), dtype=np.int64, count=len(rows))
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self.pieces = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def row(self, index: int) -> np.ndarray:
        return self.pieces[self.offsets[index]:self.offsets[index + 1]]

    def select(self, rows: np.ndarray) -> PackedTable:
        """The table of the given rows only, in that order."""
        return PackedTable([self.row(int(r)) for r in rows])


def pack_rows(lengths: np.ndarray, capacity: int, groups: np.ndarray | None = None) -> PackedTable:
    """Pack items of ``lengths`` (each 1..capacity) into rows of ``capacity``.

    With ``groups`` (one label per item) rows never mix groups: the training rows of per-file
    sampling, which draws a file first and then one of its rows.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > capacity):
        raise ValueError(f"item lengths must be in 1..{capacity}")
    everything = np.arange(lengths.size, dtype=np.int64)
    if groups is None:
        return PackedTable(_pack_group(lengths, everything, capacity))
    groups = np.asarray(groups)
    rows: list[np.ndarray] = []
    for label in np.unique(groups):
        rows.extend(_pack_group(lengths, everything[groups == label], capacity))
    return PackedTable(rows)
