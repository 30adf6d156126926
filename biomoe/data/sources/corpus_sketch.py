"""MinHash sketches of the corpus's FASTA files: how alike two strains are, without aligning them.

Bottom-s MinHash on canonical 21-mers, as Mash does: the share of shared hashes estimates the
Jaccard similarity of two files' k-mer sets, and from it the Mash distance (about 1 - average
nucleotide identity) that decides which strains are near-duplicates
(:mod:`~biomoe.data.sources.corpus_splits`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from biomoe.data.sources.corpus_records import read_records
from biomoe.files import write_bytes

__all__ = ["K", "SKETCH_SIZE", "jaccard", "mash_distance", "sketch_file", "sketch_sequences"]

K = 21
"""k-mer length of the sketches: long enough that shared 21-mers between unrelated genomes are
rare, the length Mash uses by default for bacterial genomes."""

SKETCH_SIZE = 2000
"""Hashes kept per file. The Jaccard estimate's error is about 1/sqrt(size), ample to tell a
99.9 % identical strain (Jaccard ~0.95) from another strain of the species (~0.5 or less)."""


_CODE = np.full(256, 4, dtype=np.uint8)
for _i, _c in enumerate("ACGT"):
    _CODE[ord(_c)] = _CODE[ord(_c.lower())] = _i
_CHUNK = 1 << 22  # bases per piece: bounds memory (a few 32 MiB arrays) whatever the chromosome


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: k-mer codes are far from uniform, their hashes must be."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _piece_hashes(codes: np.ndarray, k: int) -> np.ndarray:
    """Hashes of the canonical k-mers (the smaller of a k-mer and its reverse complement, so
    both strands sketch alike) of one piece, k-mers with a non-ACGT letter left out."""
    n = len(codes) - k + 1
    if n <= 0:
        return np.empty(0, dtype=np.uint64)
    forward = np.zeros(n, dtype=np.uint64)
    reverse = np.zeros(n, dtype=np.uint64)
    masked = np.minimum(codes, 3).astype(np.uint64)
    for i in range(k):
        forward = (forward << np.uint64(2)) | masked[i:i + n]
        reverse |= (np.uint64(3) - masked[i:i + n]) << np.uint64(2 * i)
    bad = np.concatenate(([0], np.cumsum(codes > 3)))
    valid = (bad[k:k + n] - bad[:n]) == 0
    return _mix(np.minimum(forward, reverse)[valid])


def _bottom(values: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` smallest distinct values, sorted (a partial sort first: a piece has millions)."""
    if len(values) > size:
        smallest = np.unique(np.partition(values, size)[:size + 1])
        if len(smallest) >= size:
            return smallest[:size]
    return np.unique(values)[:size]


def sketch_sequences(sequences: Iterable[str], k: int = K, size: int = SKETCH_SIZE) -> np.ndarray:
    """Bottom-``size`` MinHash sketch (sorted uint64) of all k-mers of ``sequences``."""
    kept = np.empty(0, dtype=np.uint64)
    for sequence in sequences:
        codes = _CODE[np.frombuffer(sequence.encode("ascii", "replace"), dtype=np.uint8)]
        for start in range(0, max(len(codes) - k + 1, 1), _CHUNK):
            piece = _piece_hashes(codes[start:start + _CHUNK + k - 1], k)
            if len(piece):
                kept = _bottom(np.concatenate((kept, piece)), size)
    return kept


def sketch_file(path: str | Path, cache: str | Path | None = None, sha256: str = "",
                k: int = K, size: int = SKETCH_SIZE) -> np.ndarray:
    """The sketch of a FASTA file, kept in ``cache`` under its checksum (sketching a 50 Mb
    plant chromosome pair takes seconds; the corpus, minutes) so re-runs only read them."""
    cached = Path(cache) / f"{sha256}.k{k}.s{size}.npy" if cache is not None and sha256 else None
    if cached is not None and cached.is_file():
        return np.load(cached)
    sketch = sketch_sequences((sequence for _, sequence in read_records(path)), k, size)
    if cached is not None:
        buffer = io.BytesIO()
        np.save(buffer, sketch)
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(cached, buffer.getvalue())
    return sketch


def jaccard(a: np.ndarray, b: np.ndarray, size: int = SKETCH_SIZE) -> float:
    """Mash's estimate: the share of the union's bottom ``size`` hashes found in both sketches."""
    union = np.union1d(a, b)[:size]
    if len(union) == 0:
        return 0.0
    both = np.intersect1d(a, b, assume_unique=True)
    return float(np.isin(union, both, assume_unique=True).sum()) / len(union)


def mash_distance(similarity: float, k: int = K) -> float:
    """About 1 - ANI: ``-ln(2J / (1 + J)) / k`` (1.0 when nothing is shared)."""
    if similarity <= 0.0:
        return 1.0
    return -math.log(2.0 * similarity / (1.0 + similarity)) / k
