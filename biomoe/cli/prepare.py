"""``biomoe prepare``: pack FASTA files, folders or a corpus manifest into a checksummed store.

The store (a folder: ``.2bit`` shards and ``store.json``) trains, validates and tests like the
FASTA it came from: ``--data.fasta STORE``. See docs/corpus.md.

    python cli.py prepare data/corpus.tsv --out data/large/corpus.store
    python cli.py prepare genomes/ --out genomes.store
"""

from __future__ import annotations

import time
from pathlib import Path

from biomoe.cli.arguments import CommandParser, positive_int

__all__ = ["main"]


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="biomoe prepare", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="FASTA file(s) (plain, gzip, bgzip), folder(s) of them, or a corpus manifest .tsv")
    parser.add_argument("--out", type=Path, required=True, help="the store folder to create (new or empty)")
    parser.add_argument("--splits", type=Path, default=None,
                        help="split file (file, split columns) to record per file; default for a manifest: "
                             "corpus-splits.tsv beside it")
    parser.add_argument("--split", action="append", default=None, metavar="NAME",
                        help="store only the files of this split (repeatable), e.g. train")
    parser.add_argument("--corpus-dir", type=Path, default=None,
                        help="where a manifest's files are (default: large/corpus beside the manifest)")
    parser.add_argument("--shard-bases", type=positive_int, default=None,
                        help="bases per shard before a new one starts (default 2^28)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="where FASTA indexes and scans go")
    parser.add_argument("--soft-mask", choices=("compact", "twobit"), default="compact",
                        help="where lowercase (soft-masked) runs are kept: compact, a compressed table beside "
                             "each shard (about 2.5 bytes a run; default), or twobit, inside the .2bit shards "
                             "(8 bytes a run; UCSC tools then show the case too)")
    args = parser.parse_args(argv)
    from biomoe.data.sources.store_prepare import DEFAULT_SHARD_BASES, prepare_store  # after parsing: --help stays fast

    start = time.perf_counter()
    result = prepare_store(args.inputs, args.out, splits_file=args.splits, keep_splits=args.split,
                           corpus_dir=args.corpus_dir, shard_bases=args.shard_bases or DEFAULT_SHARD_BASES,
                           cache_dir=args.cache_dir, soft_mask=args.soft_mask,
                           say=lambda line: print(line, flush=True))
    summary = (f"{result.files} files, {result.contigs} contigs, {result.bases:,} bp, {result.bytes:,} bytes "
               f"({result.bytes_per_base:.4f} bytes/base)")
    if result.created:
        print(f"wrote {result.out}: {summary} in {time.perf_counter() - start:.1f} s")
    else:
        print(f"{result.out} is already the store of these inputs ({summary}); shards checked, nothing to do")
    return 0
