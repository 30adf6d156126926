"""Each FASTA file made ready for random access: scanned, normalised if needed, and indexed.

Training reads millions of random windows, so it needs indexed access (pyfaidx ``.fai``). Pipeline
for each file:

1. **Scan** (:mod:`~biomoe.data.sources.fasta_scan`): one streaming pass validates the content and
   records every contig's name and length. The result is cached (:mod:`~biomoe.data.sources.cache`),
   so reopening an unchanged file skips the scan while an edit in place is scanned again.
2. **Normalise if needed** (:mod:`~biomoe.data.sources.fasta_normalise`): a file pyfaidx cannot
   index as it is (plain gzip, CRLF, blank lines, ragged lines) is rewritten *once* into a plain
   FASTA in the cache directory.
3. **Index** (:mod:`~biomoe.data.sources.fasta_index`): an existing ``.fai`` is used if it matches
   the scan, else it is rebuilt (or, where it cannot be, a GenomeInputError says why).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from biomoe.data.sources.cache import cache_key, default_cache_dir, file_signature, load_scan, save_scan, say_new_cache
from biomoe.data.sources.fasta_index import PreparedFile, ensure_index
from biomoe.data.sources.fasta_normalise import write_normalised
from biomoe.data.sources.fasta_scan import listed_names, scan_fasta
from biomoe.errors import GenomeInputError

__all__ = ["prepare_file"]


def prepare_file(path: Path, cache_dir: Path | None) -> PreparedFile:
    """Scan (cached), normalise if needed (cached) and index one FASTA file; GenomeInputError on any problem."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(path)
    say_new_cache(cache)
    signature = file_signature(path)  # before reading: a change from here on is caught by fetch
    key = cache_key(path)
    stem = f"{path.name}.{key}"
    scan_json = cache / f"{stem}.scan.json"
    scan = load_scan(scan_json)
    if scan is None:
        scan = scan_fasta(path)
        try:
            save_scan(scan_json, scan)
        except (OSError, GenomeInputError) as exc:
            warnings.warn(f"{path}: cannot write scan cache to {cache} ({exc}); will rescan next time", stacklevel=3)
    if scan.empty:  # said on every run, cached scan or not: the genome in training lacks these names
        warnings.warn(f"{path}: skipped {len(scan.empty)} record(s) with no sequence ({listed_names(scan.empty)})",
                      stacklevel=3)

    if scan.canonical:
        readable = path
        beside = Path(str(path) + ".fai")
        fai = beside if beside.exists() else cache / f"{stem}.fai"
        gzi: Path | None = None
        if scan.compression == "bgzf":
            beside_gzi = Path(str(path) + ".gzi")
            gzi = beside_gzi if beside_gzi.exists() and beside.exists() else cache / f"{stem}.gzi"
    else:
        readable = cache / f"{stem}.fa"
        if not readable.exists():
            try:
                write_normalised(path, scan.compression, readable)
            except (OSError, GenomeInputError) as exc:
                raise GenomeInputError(path, f"needs a normalised copy but cache dir {cache} is not writable "
                                             f"({exc})") from None
        fai = Path(str(readable) + ".fai")
        gzi = None
    layout = scan.layout if scan.canonical and len(scan.layout) == len(scan.records) else None
    prepared = PreparedFile(path, readable, fai, gzi, scan.records, layout, signature)
    ensure_index(prepared)
    return prepared
