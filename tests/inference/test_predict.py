"""FASTA scoring and zero-shot variant scoring with a tiny model on CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from biomoe.cli.main import main as cli_main
from biomoe.model.config import ModelConfig
from biomoe.errors import GenomeInputError
from biomoe.data.sources.genome import Genome
from biomoe.inference.load import load_model
from biomoe.inference.scoring import sequence_log_likelihood
from biomoe.model.losses import masked_cross_entropy_sum
from biomoe.model.transformer import MoETransformer
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer
from biomoe.inference.score_variants import Variant, score_variants
from conftest import ROOT, random_dna, save_checkpoint

TOK = NucleotideTokenizer()


def test_per_base_scores_match_the_training_loss_and_are_causal(tiny_checkpoint):
    model = load_model(tiny_checkpoint)
    seq = random_dna(200, seed=1)
    seq = seq[:50] + "NN" + seq[52:]
    (scores,) = sequence_log_likelihood(model, [seq])
    assert scores.shape == (200,) and np.isnan(scores[50:52]).all() and not np.isnan(scores[:50]).any()
    labels = torch.from_numpy(TOK.encode(seq))[None]
    inputs = torch.cat([torch.tensor([[BOS_ID]]), labels[:, :-1]], dim=1)
    with torch.no_grad():
        ce, n = masked_cross_entropy_sum(model(inputs).logits, labels, TOK.unambiguous_mask(labels))
    assert -np.nansum(scores) == pytest.approx(float(ce), rel=1e-5) and int(n) == 198
    changed = seq[:120] + ("A" if seq[120] != "A" else "C") + seq[121:]
    (after,) = sequence_log_likelihood(model, [changed])
    np.testing.assert_allclose(after[:120], scores[:120], rtol=1e-5, equal_nan=True)
    assert np.abs(after[121:] - scores[121:]).max() > 1e-4


def test_score_fasta_writes_table_and_per_base_arrays(tiny_checkpoint, write_fasta, tmp_path):
    fasta = write_fasta({"one": random_dna(300, 2), "two": random_dna(90, 3) + "NNNNNNNNNN"})
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"),
                     "--window", "128", "--per-base"]) == 0
    lines = (tmp_path / "s.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:3] == ["contig", "length", "scored_bases"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert rows["one"][1:3] == ["300", "300"] and rows["two"][1:3] == ["100", "90"]
    arrays = np.load(tmp_path / "s.npz")
    assert float(rows["one"][3]) == pytest.approx(float(np.nansum(arrays["one"])), rel=1e-4)
    bits = float(rows["two"][4])
    assert bits == pytest.approx(-np.nansum(arrays["two"]) / math.log(2) / 90, rel=1e-4) and bits > 0


def test_variant_llr_is_alt_minus_ref_over_a_centred_window(tiny_checkpoint, write_fasta):
    seq = random_dna(400, seed=4)
    genome = Genome(write_fasta({"chr": seq}))
    model = load_model(tiny_checkpoint)
    pos = 200  # 1-based
    alt = "A" if seq[pos - 1] != "A" else "G"
    edge = "C" if seq[4] != "C" else "T"
    rows = score_variants(model, genome, [Variant("chr", pos, seq[pos - 1], alt), Variant("chr", 5, seq[4], edge)],
                          window=100)
    assert rows[0]["window_start"] == pos - 1 - 50 and rows[1]["window_start"] == 0  # clipped at the start
    ref_win = seq[149:249]
    alt_win = ref_win[:50] + alt + ref_win[51:]
    ref_ll, alt_ll = sequence_log_likelihood(model, [ref_win, alt_win])
    assert rows[0]["llr"] == pytest.approx(float(alt_ll.sum() - ref_ll.sum()), abs=1e-4)
    assert abs(rows[0]["llr"]) > 1e-3


def test_substitution_longer_than_the_window_is_refused(tiny_checkpoint, write_fasta):
    """A window shorter than the allele cannot hold it; scoring it anyway compared windows of
    different lengths (a silently wrong llr)."""
    seq = random_dna(200, seed=6)
    genome = Genome(write_fasta({"chr": seq}))
    ref = seq[99:105]
    alt = "".join("A" if b != "A" else "C" for b in ref)
    with pytest.raises(GenomeInputError, match="do not fit"):
        score_variants(load_model(tiny_checkpoint), genome, [Variant("chr", 100, ref, alt)], window=4)


def test_variant_table_cli_and_reference_mismatch_error(tiny_checkpoint, write_fasta, tmp_path, capsys):
    seq = random_dna(300, seed=5)
    fasta = write_fasta({"chr": seq})
    table = tmp_path / "v.tsv"
    wrong = "A" if seq[99] != "A" else "C"
    alt = "G" if seq[9] != "G" else "T"
    table.write_text(f"contig\tposition\tref\talt\nchr\t10\t{seq[9]}\t{alt}\n")
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table),
                     "--out", str(tmp_path / "o.tsv"), "--window", "64"]) == 0
    out = (tmp_path / "o.tsv").read_text().splitlines()
    assert out[0].split("\t") == ["contig", "position", "id", "ref", "alt", "window_start", "logp_ref", "logp_alt",
                                  "llr"]
    assert len(out) == 2 and out[1].startswith(f"chr\t10\t.\t{seq[9]}\t{alt}\t0\t")  # no id column: '.'
    capsys.readouterr()  # the successful run's progress bar
    table.write_text(f"chr\t10\t{seq[9]}\t{alt}\nchr\t100\t{wrong}\tT\n")
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table),
                     "--out", str(tmp_path / "o2.tsv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"chr:100 {wrong}>T" in err and "does not match" in err
    assert not (tmp_path / "o2.tsv").exists()


@pytest.mark.parametrize("content, match", [
    (None, "no such file"),
    (b"", "no variants to score"),
    (b"contig\tposition\tref\talt\n# nothing\n", "no variants to score"),
    (b"\xff\xfechr\t10\tA\tC\n", "not a text table"),
    (b"\x1f\x8b\x08\x00garbage", "gzip-compressed"),
    (b"chr\t1\xc2\xb2\tA\tC\n", "position must be a 1-based integer"),  # '1²' passes str.isdigit
])
def test_bad_variant_tables_are_one_line_errors(tiny_checkpoint, write_fasta, tmp_path, capsys, content, match):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    table = tmp_path / "v.tsv"
    if content is not None:
        table.write_bytes(content)
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(table),
                     "--out", str(tmp_path / "o.tsv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"biomoe: error: {table}: ") and match in err, err
    assert not (tmp_path / "o.tsv").exists()


def test_variant_table_with_bom_and_crlf_is_read(tmp_path):
    """A spreadsheet's UTF-8 export starts with a byte-order mark: its header line was taken for a
    variant ('position must be a 1-based integer, got 'position'')."""
    from biomoe.inference.score_variants import read_variants

    table = tmp_path / "v.tsv"
    table.write_bytes(b"\xef\xbb\xbfcontig\tposition\tref\talt\r\nchr\t5\tA\tG\r\n")
    assert read_variants(table) == [Variant("chr", 5, "A", "G")]


def test_variant_table_folder_is_an_error(tiny_checkpoint, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    assert cli_main(["score-variants", str(tiny_checkpoint), str(fasta), "--variants", str(tmp_path),
                     "--out", str(tmp_path / "o.tsv")]) == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fasta", "truncated", "no_state_dict"])
def test_bad_checkpoint_files_are_one_line_errors(tiny_checkpoint, write_fasta, tmp_path, capsys, kind):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    bad = {"fasta": fasta, "truncated": tmp_path / "cut.ckpt", "no_state_dict": tmp_path / "other.ckpt"}[kind]
    if kind == "truncated":
        bad.write_bytes(tiny_checkpoint.read_bytes()[:1000])
    elif kind == "no_state_dict":
        torch.save({"weights": torch.zeros(2)}, bad)
    assert cli_main(["score-fasta", str(bad), str(fasta), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"biomoe: error: {bad}: "), err
    assert not (tmp_path / "s.tsv").exists()


@pytest.mark.parametrize("option", ["--window", "--batch-size"])
def test_score_fasta_rejects_non_positive_sizes(tiny_checkpoint, write_fasta, tmp_path, capsys, option):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    code = cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"), option, "0"])
    err = capsys.readouterr().err
    assert code == 2 and "expected a positive integer" in err and len(err.strip().splitlines()) == 1, err


def test_unwritable_output_is_one_line(tiny_checkpoint, write_fasta, tmp_path, capsys):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(blocker / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot write output" in err


def _read_scores(prefix):
    rows = [line.split("\t") for line in prefix.with_suffix(".tsv").read_text().splitlines()[1:]]
    return {r[0]: float(r[4]) for r in rows}, np.load(prefix.with_suffix(".npz"))


def test_score_fasta_with_the_repeat_expert_uses_only_the_checkpoints_training_split(write_fasta, tmp_path,
                                                                                     capsys):
    """A copy of a training stretch becomes nearly certain; sequence the table never saw (novel, or
    from the held-out 10 % of the training genome) keeps exactly the network's scores."""
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                      ffn_hidden_size=32)
    genome = random_dna(4000, seed=11)
    train_fa = write_fasta({"chr": genome}, name="train.fa")
    ckpt = save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg,
                           data={"fasta": [str(train_fa)], "val_fraction": 0.1, "val_contigs": None})
    query = write_fasta({"copy": genome[1000:1600], "novel": random_dna(600, seed=12),
                         "heldout": genome[3700:4000]}, name="query.fa")
    base = [str(ckpt), str(query), "--window", "256", "--per-base"]
    assert cli_main(["score-fasta", *base, "--out", str(tmp_path / "alone")]) == 0
    assert cli_main(["score-fasta", *base, "--out", str(tmp_path / "mixed"), "--repeat-expert"]) == 0
    assert "warning" not in capsys.readouterr().err  # 37 % of the query is in the table
    alone, alone_ll = _read_scores(tmp_path / "alone")
    mixed, mixed_ll = _read_scores(tmp_path / "mixed")
    assert alone["copy"] > 1.5 and mixed["copy"] < 0.5 * alone["copy"]
    for name in ("novel", "heldout"):
        np.testing.assert_allclose(mixed_ll[name], alone_ll[name], rtol=1e-5, atol=1e-6)
    # The first k bases of each window have no context for the expert: unchanged there too.
    np.testing.assert_allclose(mixed_ll["copy"][:10], alone_ll["copy"][:10], rtol=1e-5)
    # The same table from the training file given explicitly, whole: the held-out stretch is now known.
    assert cli_main(["score-fasta", *base, "--out", str(tmp_path / "whole"), "--repeat-fasta", str(train_fa)]) == 0
    # Now both copy and heldout are in the table, all but the first k = 13 bases of each 256-base window.
    covered = (600 - 3 * 13 + 300 - 2 * 13) / 1500
    assert f"{covered:.0%} of the scored bases follow a k-mer" in capsys.readouterr().err
    whole, _ = _read_scores(tmp_path / "whole")
    assert whole["heldout"] < 0.5 * alone["heldout"] and whole["novel"] == pytest.approx(alone["novel"], rel=1e-5)


def test_repeat_expert_without_training_fasta_is_a_one_line_error(tiny_checkpoint, tiny_config, write_fasta, tmp_path,
                                                                  capsys):
    fasta = write_fasta({"chr": random_dna(300, seed=5)})
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"),
                     "--repeat-expert"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "records no training FASTA" in err and str(tiny_checkpoint) in err
    moved = save_checkpoint(tmp_path / "moved.ckpt", load_model(tiny_checkpoint), tiny_config(),
                            data={"fasta": [str(tmp_path / "gone.fa")], "val_fraction": 0.1})
    assert cli_main(["score-fasta", str(moved), str(fasta), "--out", str(tmp_path / "s"), "--repeat-expert"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gone.fa" in err and "--repeat-fasta" in err
    only_n = write_fasta({"gap": "N" * 500}, name="gap.fa")
    assert cli_main(["score-fasta", str(tiny_checkpoint), str(fasta), "--out", str(tmp_path / "s"), "--repeat-fasta",
                     str(only_n)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gap.fa" in err and "repeat expert would be empty" in err
    assert not (tmp_path / "s.tsv").exists()


def test_a_file_where_the_predictions_folder_goes_is_one_line(tmp_path):
    from biomoe.errors import GenomeInputError
    from biomoe.training.reports.prediction_writer import _make_folder

    blocker = tmp_path / "predictions"
    blocker.write_text("not a folder")
    with pytest.raises(GenomeInputError, match="is a file, not a folder") as caught:
        _make_folder(blocker)
    assert str(blocker) in str(caught.value) and blocker.read_text() == "not a folder"
    with pytest.raises(GenomeInputError, match=r"a parent of .*predictions[/\\]inner"):
        _make_folder(blocker / "inner")


@pytest.mark.slow
def test_predict_beside_a_file_named_predictions_writes_to_the_next_free_folder(tmp_path, capsys):
    from biomoe.cli.main import main as cli_main

    root = ROOT
    (tmp_path / "predictions").write_text("a user's notes")
    assert cli_main(["predict", "--config", str(root / "configs/tiny.yaml"), "--trainer.default_root_dir",
                     str(tmp_path), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
                     "--data.fasta", str(root / "data/lambda_virus.fa.gz"), "--data.val_fraction", "0.02"]) == 0
    capsys.readouterr()
    assert (tmp_path / "predictions").read_text() == "a user's notes"
    assert (tmp_path / "predictions_1" / "window_scores.tsv").is_file()


@pytest.mark.slow
def test_packed_predict_scores_each_document_alone_and_short_records_too(tmp_path, write_fasta, capsys):
    """With data.packing, predict writes a line per document of a packed row: every fixed window of
    packing off is there with the same log-likelihood (a document scores as if alone), and the short
    records and contig ends that fixed windows skip have lines of their own."""
    import csv

    from biomoe.cli.main import main as cli_main

    root = ROOT
    fasta = write_fasta({"long": random_dna(3000, 4), "plasmid": random_dna(150, 5), "phage": random_dna(90, 6)})
    data = ["--data.fasta", str(fasta), "--data.seq_length", "128", "--data.val_fraction", "0.5"]
    quiet = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    assert cli_main(["fit", "--config", str(root / "configs/tiny.yaml"), *data, *quiet, "--trainer.max_steps", "2",
                     "--trainer.default_root_dir", str(tmp_path / "fit")]) == 0
    (ckpt,) = (tmp_path / "fit").rglob("last.ckpt")

    def predict(packing: str, folder: str) -> dict[tuple[str, int, int], float]:
        assert cli_main(["predict", "--config", str(root / "configs/tiny.yaml"), "--ckpt_path", str(ckpt), *data,
                         "--data.packing", packing, *quiet, "--trainer.default_root_dir", str(tmp_path / folder)]) == 0
        with open(tmp_path / folder / "predictions" / "window_scores.tsv") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        return {(r["contig"], int(r["start"]), int(r["end"])): float(r["log_likelihood"]) for r in rows}

    windows, documents = predict("false", "windows"), predict("true", "packed")
    capsys.readouterr()
    assert windows and set(windows) < set(documents)
    for key, value in windows.items():
        assert documents[key] == pytest.approx(value, rel=1e-3, abs=1e-3), key
    extra = set(documents) - set(windows)
    assert {c for c, _, _ in extra} >= {"plasmid", "phage"}  # short records: skipped as windows, scored packed
    assert sum(e - s for _, s, e in documents) == 1500 + 75 + 45  # the last half of every record, once
