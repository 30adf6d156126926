"""FASTA reading: formats agree, tolerated quirks, and one-line errors for bad input."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import time
from pathlib import Path

import pytest

from biomoe.data.sources import fasta_compression
from biomoe.data.sources.fasta_paths import resolve_fasta_paths
from biomoe.data.sources.genome import Genome
from biomoe.errors import GenomeInputError
from conftest import ROOT, fasta_text, random_dna

RECORDS = {"chr1": random_dna(1000, 1), "chr2": random_dna(333, 2), "chrM": random_dna(61, 3)}


def _read_all(genome: Genome) -> dict[str, str]:
    return {c.name: genome.fetch(c.name, 0, c.length) for c in genome.contigs}


@pytest.mark.parametrize("compression", [None, "gzip", "bgzf"])
def test_formats_read_identically(write_fasta, cache_dir, compression) -> None:
    path = write_fasta(RECORDS, name="g.fa.gz" if compression else "g.fa", compression=compression)
    g = Genome(path, cache_dir=cache_dir)
    assert [(c.name, c.length, c.path) for c in g.contigs] == [(n, len(s), path) for n, s in RECORDS.items()]
    assert len(g) == sum(map(len, RECORDS.values()))
    assert _read_all(g) == RECORDS
    assert g.fetch("chr1", 10, 25) == RECORDS["chr1"][10:25]
    assert g.fetch(1, 330, 333) == RECORDS["chr2"][330:]
    # reopening uses the cached scan and still reads the same
    assert _read_all(Genome(path, cache_dir=cache_dir)) == RECORDS


def test_bgzf_and_gzip_detected(write_fasta, cache_dir) -> None:
    assert fasta_compression.sniff_compression(write_fasta(RECORDS, "a.fa.gz", "bgzf")) == "bgzf"
    assert fasta_compression.sniff_compression(write_fasta(RECORDS, "b.fa.gz", "gzip")) == "gzip"
    assert fasta_compression.sniff_compression(write_fasta(RECORDS, "c.fa")) == "none"


def test_crlf_ragged_lines_and_lowercase_accepted(write_fasta, cache_dir) -> None:
    seq = "ACGTacgtnnNNRYKM" * 10
    text = ">s1 soft masked\r\n" + seq[:50] + "\r\n" + seq[50:70] + "\r\n\r\n" + seq[70:] + "\r\n>s2\r\nAC\r\n"
    for i, comp in enumerate([None, "gzip", "bgzf"]):
        path = write_fasta(text, name=f"crlf{i}.fa" + (".gz" if comp else ""), compression=comp)
        g = Genome(path, cache_dir=cache_dir)
        assert _read_all(g) == {"s1": seq, "s2": "AC"}


@pytest.mark.parametrize("compression", ["gzip", None, "bgzf"])
def test_crlf_file_whose_last_line_lacks_its_lf_is_read(write_fasta, cache_dir, compression) -> None:
    """A Windows file cut after the last line's CR (no LF) was refused as old Mac (CR-only) line
    endings, though every other line ends in CRLF."""
    text = ">s1\r\nACGTAC\r\nGT\r\n>s2\r\nGGTT\r"
    path = write_fasta(text, name="g.fa.gz" if compression else "g.fa", compression=compression)
    assert _read_all(Genome(path, cache_dir=cache_dir)) == {"s1": "ACGTACGT", "s2": "GGTT"}


def test_folder_and_multiple_files(tmp_path, write_fasta, cache_dir) -> None:
    folder = tmp_path / "genome"
    folder.mkdir()
    (folder / "b.fa").write_text(">b1\nACGT\n")
    (folder / "a.fna.gz").write_bytes(gzip.compress(b">a1\nGGCC\n"))
    (folder / "notes.txt").write_text("ignored")
    (folder / "b.fa.fai").write_text("b1\t4\t4\t4\t5\n")  # an index beside its FASTA: no warning
    with pytest.warns(UserWarning, match=r"skipped 1 file\(s\) not named like FASTA \(notes.txt\)"):
        assert [p.name for p in resolve_fasta_paths(folder)] == ["a.fna.gz", "b.fa"]
    with pytest.warns(UserWarning, match="notes.txt"):
        g = Genome(folder, cache_dir=cache_dir)
    assert g.names == ["a1", "b1"]
    g2 = Genome([folder / "b.fa", folder / "a.fna.gz"], cache_dir=cache_dir)
    assert g2.names == ["b1", "a1"] and g2.fetch("a1", 1, 3) == "GC"


def test_genome_pickles_without_handles(write_fasta, cache_dir) -> None:
    g = Genome(write_fasta(RECORDS), cache_dir=cache_dir)
    g.fetch("chr1", 0, 5)
    g2 = pickle.loads(pickle.dumps(g))
    assert g2._handles == {} and g2.fetch("chr1", 0, 5) == RECORDS["chr1"][:5]


def test_default_cache_next_to_file(write_fasta) -> None:
    path = write_fasta(RECORDS, "z.fa.gz", "gzip")
    Genome(path)
    cached = list((path.parent / ".biomoe_cache").glob("z.fa.gz.*.fa"))
    assert len(cached) == 1
    assert not (path.parent / "z.fa.gz.fai").exists()


def test_validation_is_fast_and_cached(write_fasta, cache_dir) -> None:
    path = write_fasta({"big": random_dna(2_000_000, 5)}, "big.fa.gz", "gzip", width=80)
    t0 = time.perf_counter()
    Genome(path, cache_dir=cache_dir)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    Genome(path, cache_dir=cache_dir)
    second = time.perf_counter() - t0
    assert first < 2.0, first
    assert second < first


# ---------------------------------------------------------------------------------------
# errors: each must be a GenomeInputError with a one-line message naming the file
# ---------------------------------------------------------------------------------------
def _expect_error(path, match: str, cache_dir) -> GenomeInputError:
    with pytest.raises(GenomeInputError, match=match) as info:
        Genome(path, cache_dir=cache_dir)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return info.value


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "empty"),
        (b"\n\n", "no FASTA records"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00" * 10, "binary"),
        (b"@read1\nACGT\n+\nIIII\n", "FASTQ"),
        (b"hello world\nthis is text\n", "does not start with '>'"),
        (b">empty\n>chr3\n", "no record has sequence \\('empty', 'chr3' are headers only\\)"),
        (b">chr1\nACGT\n>chr1\nAC\n", "duplicate contig name 'chr1'"),
        (b">\nACGT\n", "has no name"),
        (b">chr1\nACGT\n>chr2\nACGTACGTAC\nACJT\n", "contig 'chr2' has character 'J' outside IUPAC at position 13"),
        (b">chr1\nAC-T\n", "character '-' outside IUPAC at position 3"),
        (b"BZh91AY&SY", "bzip2"),
        (b">chr1\rACGT\rACGT\r", "carriage return.*CR-only"),
        (b">chr1\nACGT\rACGT\r", "line 2 contains a carriage return"),
        (b">chr1\nACGT\nAC\r", "line 3 contains a carriage return"),  # no line ends in CRLF: a stray CR
        (b"\xef\xbb\xbf>chr1\nACGT\n", "byte-order mark"),
        (b">chr\xff1\nACGT\n", "header on line 1 is not valid UTF-8"),
        (b">chr1\nACGT\n>chr2 r\xe9gion\nACGT\n", "header on line 3 is not valid UTF-8"),
    ],
)
def test_bad_inputs(write_fasta, cache_dir, content, match) -> None:
    _expect_error(write_fasta(content, name="bad.fa"), match, cache_dir)


@pytest.mark.parametrize("compress", [False, True])
def test_records_without_sequence_are_skipped_with_a_warning(write_fasta, cache_dir, compress) -> None:
    """A header with no sequence (mid-file or last) is not a contig; the rest of the file is used,
    and the warning names the skipped records on every open, from a cached scan too."""
    path = write_fasta(b">a\nACGTACGTAA\nAC\n>empty\n>b\nGGGGCCCC\n>tail\n", name="holes.fa")
    if compress:
        gz = path.with_suffix(".fa.gz")
        gz.write_bytes(gzip.compress(path.read_bytes()))
        path = gz
    for _ in range(2):
        with pytest.warns(UserWarning, match=r"skipped 2 record\(s\) with no sequence \('empty', 'tail'\)"):
            genome = Genome(path, cache_dir=cache_dir)
        assert {c.name: c.length for c in genome.contigs} == {"a": 12, "b": 8}
        assert genome.fetch("a", 8, 12) == "AAAC" and genome.fetch("b", 0, 4) == "GGGG"


def test_bad_char_position_uses_thousands_separator(write_fasta, cache_dir) -> None:
    seq = "A" * 1203 + "J"
    err = _expect_error(write_fasta({"chr2": seq}, name="x.fa", width=70), r"position 1,204\b", cache_dir)
    assert "chr2" in str(err)


def test_bad_char_in_gzip(write_fasta, cache_dir) -> None:
    _expect_error(write_fasta(">c\nACGU\n", name="u.fa.gz", compression="gzip"), "'U' outside IUPAC", cache_dir)


def test_missing_path(tmp_path, cache_dir) -> None:
    _expect_error(tmp_path / "nope.fa", "no such file", cache_dir)


def test_empty_folder(tmp_path, cache_dir) -> None:
    (tmp_path / "empty").mkdir()
    _expect_error(tmp_path / "empty", "no FASTA files", cache_dir)


def test_duplicate_names_across_files_are_namespaced_by_file(write_fasta, cache_dir) -> None:
    """Assemblers name contigs contig_1, contig_2, ... in every genome: a name in several files
    becomes <file label>#<name> (each read from its own file); names in one file only stay."""
    a = write_fasta({"chr1": "ACGT", "only_a": "TTTT"}, name="a.fa")
    b = write_fasta({"chr1": "GGGGCC"}, name="b.fa.gz", compression="gzip")
    with pytest.warns(UserWarning, match="'chr1' occurs in several FASTA files"):
        genome = Genome([a, b], cache_dir=cache_dir)
    assert genome.names == ["a#chr1", "only_a", "b#chr1"]
    assert genome.labels == ["a", "b"]
    assert genome.fetch("a#chr1", 0, 4) == "ACGT" and genome.fetch("b#chr1", 0, 6) == "GGGGCC"
    assert genome.fetch("only_a", 0, 4) == "TTTT"
    assert [c.file_index for c in genome.contigs] == [0, 0, 1]
    assert genome.contig("b#chr1").record_name == "chr1"


def test_file_labels_stay_unique() -> None:
    from biomoe.data.sources.fasta_paths import file_labels

    assert file_labels([Path("x/ecoli.fna.gz"), Path("x/staph.fa")]) == ["ecoli", "staph"]
    assert file_labels([Path("x/g.fa"), Path("x/g.fa.gz")]) == ["g.fa", "g.fa.gz"]
    assert len(set(file_labels([Path("x/g.fa"), Path("y/g.fa")]))) == 2


def test_corrupted_gzip(write_fasta, cache_dir) -> None:
    good = gzip.compress(fasta_bytes := (">c\n" + random_dna(50_000, 9) + "\n").encode())
    assert len(fasta_bytes) > 0
    truncated = write_fasta(good[: len(good) // 2], name="trunc.fa.gz")
    _expect_error(truncated, "corrupted gzip", cache_dir)
    garbled = bytearray(good)
    garbled[20:60] = b"\xff" * 40
    _expect_error(write_fasta(bytes(garbled), name="garbled.fa.gz"), "corrupted gzip", cache_dir)


def test_unreadable_file(write_fasta, cache_dir, monkeypatch) -> None:
    path = write_fasta(RECORDS)
    if os.geteuid() != 0:
        path.chmod(0)
        try:
            _expect_error(path, "permission denied", cache_dir)
        finally:
            path.chmod(0o644)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == path else real_access(p, mode))
    _expect_error(path, "permission denied", cache_dir)


def test_stale_fai_is_rebuilt(write_fasta, cache_dir) -> None:
    path = write_fasta(RECORDS)
    fai = Path(str(path) + ".fai")
    fai.write_text("chr1\t5\t6\t60\t61\nchr2\t7\t100\t60\t61\n")  # wrong lengths, newer than file
    with pytest.warns(UserWarning, match="did not match the file; rebuilt"):
        g = Genome(path, cache_dir=cache_dir)
    assert _read_all(g) == RECORDS
    assert fai.read_text().startswith("chr1\t1000\t")


def test_garbage_fai_is_rebuilt(write_fasta, cache_dir) -> None:
    path = write_fasta(RECORDS)
    Path(str(path) + ".fai").write_bytes(b"\x00garbage")
    assert _read_all(Genome(path, cache_dir=cache_dir)) == RECORDS


def test_stale_fai_in_readonly_folder_is_an_error(write_fasta, cache_dir, monkeypatch) -> None:
    path = write_fasta(RECORDS)
    fai = Path(str(path) + ".fai")
    fai.write_text("chr1\t5\t6\t60\t61\n")
    real_access = os.access
    monkeypatch.setattr(
        os, "access",
        lambda p, mode: False if (mode & os.W_OK and Path(p) == path.parent) else real_access(p, mode),
    )
    _expect_error(path, "does not match", cache_dir)


def _edit_header_keep_lengths(path: Path) -> None:
    """Rewrite ``path`` with longer headers and other line widths (same names and lengths, so every
    .fai offset moves), dated before its existing .fai, as a restore from a backup would."""
    fai = Path(str(path) + ".fai")
    path.write_text(fasta_text({f"{n} edited description" : s for n, s in RECORDS.items()}, width=50))
    old = fai.stat().st_mtime_ns - 10**9
    os.utime(path, ns=(old, old))


def test_fai_with_right_lengths_but_wrong_offsets_is_rebuilt(write_fasta, cache_dir) -> None:
    """Lengths alone let a stale .fai through: pyfaidx then returned header text as sequence."""
    path = write_fasta(RECORDS)
    assert _read_all(Genome(path, cache_dir=cache_dir)) == RECORDS
    import pyfaidx

    pyfaidx.Fasta(str(path)).close()  # a .fai next to the file, as samtools faidx would write
    _edit_header_keep_lengths(path)
    assert _read_all(Genome(path, cache_dir=cache_dir)) == RECORDS


def test_fai_with_wrong_offsets_in_readonly_folder_is_an_error(write_fasta, cache_dir, monkeypatch) -> None:
    path = write_fasta(RECORDS)
    import pyfaidx

    pyfaidx.Fasta(str(path)).close()
    _edit_header_keep_lengths(path)
    real_access = os.access
    monkeypatch.setattr(
        os, "access",
        lambda p, mode: False if (mode & os.W_OK and Path(p) == path.parent) else real_access(p, mode),
    )
    _expect_error(path, "does not match", cache_dir)


def test_samtools_fai_of_unterminated_single_line_record_is_used(write_fasta, cache_dir, monkeypatch) -> None:
    """samtools counts a newline in bytes-per-line even for a one-line last record without one (pyfaidx
    does not). That index is right; it was taken for stale: rebuilt over the user's file, and refused
    in a read-only folder."""
    path = write_fasta(b">a\nACGTACGT\nACG\n>b desc\nACGTACG")
    fai = Path(str(path) + ".fai")
    samtools = "a\t11\t3\t8\t9\nb\t7\t24\t7\t8\n"  # what `samtools faidx` writes for this file
    fai.write_text(samtools)
    real_access = os.access
    monkeypatch.setattr(
        os, "access",
        lambda p, mode: False if (mode & os.W_OK and Path(p) == path.parent) else real_access(p, mode),
    )
    assert _read_all(Genome(path, cache_dir=cache_dir)) == {"a": "ACGTACGTACG", "b": "ACGTACG"}
    assert fai.read_text() == samtools


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_header_starting_exactly_at_a_chunk_boundary(write_fasta, cache_dir, monkeypatch, compression) -> None:
    """A read chunk ending in a newline left the scanner 'mid-line', so a header starting exactly at a
    1 MiB boundary was refused as a '>' inside the previous contig's sequence."""
    monkeypatch.setattr(fasta_compression, "_CHUNK", 8)
    text = ">a\nACGT\n>b\nAC\n"  # byte 8 is the '>' of record b
    path = write_fasta(text, name="g.fa.gz" if compression else "g.fa", compression=compression)
    assert _read_all(Genome(path, cache_dir=cache_dir)) == {"a": "ACGT", "b": "AC"}


def test_truncated_bgzf_is_an_error(write_fasta, cache_dir) -> None:
    """A bgzip file cut at a block boundary decompresses cleanly; only the EOF block tells."""
    path = write_fasta(RECORDS, name="t.fa.gz", compression="bgzf")
    data = path.read_bytes()
    assert data.endswith(fasta_compression._BGZF_EOF)
    path.write_bytes(data[: -len(fasta_compression._BGZF_EOF)])
    _expect_error(path, "truncated bgzip", cache_dir)


def test_unwritable_cache_dir_is_one_line(write_fasta, tmp_path) -> None:
    path = write_fasta(RECORDS)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.warns(UserWarning, match="cannot write scan cache"):
        _expect_error(path, "cannot write index", blocker / "cache")


def test_modified_file_is_rescanned(write_fasta, cache_dir) -> None:
    path = write_fasta({"a": "ACGT"})
    assert Genome(path, cache_dir=cache_dir).contig("a").length == 4
    path.write_text(">a\nACGTACGT\n>b\nGG\n")
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    g = Genome(path, cache_dir=cache_dir)
    assert [(c.name, c.length) for c in g.contigs] == [("a", 8), ("b", 2)]
    assert g.fetch("a", 4, 8) == "ACGT"


def test_bundled_genomes() -> None:
    root = ROOT / "data"
    lam = root / "lambda_virus.fa.gz"
    if not lam.exists():
        pytest.skip("bundled data not present")
    cache = root.parent / ".pytest_cache" / "genome_cache"
    shutil.rmtree(cache, ignore_errors=True)
    g = Genome(lam, cache_dir=cache)
    assert len(g) == 48_502
    yeast = Genome(root / "yeast_chrI.fna.gz", cache_dir=cache)
    assert yeast.names == ["NC_001133.9"] and len(yeast) == 230_218
    assert yeast.fetch(0, 0, 6) == "ccacac"  # soft-masked telomere kept lowercase


def test_the_same_file_named_twice_is_used_once_with_a_warning(write_fasta, tmp_path) -> None:
    """Listed twice, through a symlink, or again inside a listed folder: one file, trained on once."""
    path = write_fasta({"chr1": "ACGT" * 10}, name="g.fa")
    link = tmp_path / "link.fa"
    link.symlink_to(path)
    with pytest.warns(UserWarning, match="listed again") as seen:
        found = resolve_fasta_paths([path, str(path), link, path.parent])
    assert found == [path] + [p for p in resolve_fasta_paths(path.parent) if p.resolve() != path.resolve()]
    assert any(f"as {path}" in str(w.message) for w in seen)
