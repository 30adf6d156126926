"""Property-based tests of the input contract: whatever the FASTA, variant table or config value,
biomoe either does its job or prints one line ``biomoe: error: <file or key>: <problem>`` and
exits 2; it never shows a traceback and never changes an input file.

Examples are derandomised, so CI sees the same cases every run (about a minute on 2 cores). For a
longer, random exploration: ``BIOMOE_FUZZ=explore pytest tests/product/test_reliability_fuzz.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from biomoe.data.sources.genome import Genome  # noqa: E402
from biomoe.errors import GenomeInputError  # noqa: E402
from biomoe.model.config import ConfigError  # noqa: E402
from biomoe.cli.run import config_checks  # noqa: E402
from biomoe.cli.main import main  # noqa: E402
from conftest import ROOT, random_dna  # noqa: E402

settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("explore", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = "explore" if os.environ.get("BIOMOE_FUZZ") == "explore" else "ci"
settings.load_profile(PROFILE)


def _examples(n: int) -> int:
    return settings.get_profile(PROFILE).max_examples if PROFILE == "explore" else n


def _run(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in this process: exit status and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _assert_contract(code: int, stderr: str, ok_codes: tuple[int, ...] = (0, 2)) -> None:
    assert code in ok_codes, (code, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    if code != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("biomoe: error: "), stderr[-2000:]
        assert sum(line.startswith("biomoe: error") for line in lines) == 1, stderr[-2000:]


# ------------------------------------------------------------------------------------- FASTA
_GOOD_LINE = st.text(alphabet="ACGTacgt", min_size=1, max_size=70)
_AMBIGUOUS_LINE = st.text(alphabet="ACGTNnRYKMSWBDHV", min_size=1, max_size=70)
_BAD_LINE = st.text(alphabet="ACGTJUX*-. \t0é\x00\x01", min_size=1, max_size=20)
_HEADER = st.sampled_from([">c1", ">c2 desc", ">c1", ">", "> ", ">\tx", ">contig_1 len=4", ">é", "@read"])
_LINE = st.one_of(_GOOD_LINE, _GOOD_LINE, _GOOD_LINE, _BAD_LINE, _HEADER, st.just(""))


@given(data=st.data())
@settings(max_examples=_examples(150))
def test_any_fasta_opens_or_is_one_line_naming_it(data) -> None:
    content = _draw_fasta(data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("g.fa.gz" if content[:2] == b"\x1f\x8b" else "g.fa")
        path.write_bytes(content)
        try:
            genome = Genome(path, cache_dir=Path(folder) / "cache")
        except GenomeInputError as exc:
            event("refused")
            message = str(exc)
            assert message.startswith(f"{path}: ") and "\n" not in message, message
        else:
            event("opened")
            for contig in genome.contigs:  # what it accepted reads back in full, IUPAC only
                bases = genome.fetch(contig.name, 0, contig.length)
                assert len(bases) == contig.length
                assert set(bases.upper()) <= set("ACGTNRYSWKMBDHV"), bases
        assert path.read_bytes() == content


_DAMAGE = ["none", "none", "ambiguous", "bad-line", "blank-line", "crlf", "cr-only", "duplicate", "empty-record",
           "no-header", "bom", "gzip", "gzip-cut", "bgzf", "binary-prefix", "lowercase", "trailing-space-header"]


def _draw_fasta(data) -> bytes:
    """Mostly valid FASTA (two records of a few lines) with 0-2 damages from real-world mistakes
    (stray characters, line endings, repeated or empty records, compression cut short, ...)."""
    records = [(name, data.draw(st.lists(_GOOD_LINE, min_size=1, max_size=6))) for name in ("c1", "c2")]
    damages = data.draw(st.lists(st.sampled_from(_DAMAGE), min_size=0, max_size=2))
    lines: list[str] = []
    for name, seq in records:
        lines.append(f">{name} sample" + (" " if "trailing-space-header" in damages else ""))
        lines.extend(seq)
    if "ambiguous" in damages:  # IUPAC codes: valid, but windows with too many are not trained on
        lines.insert(data.draw(st.integers(1, len(lines))), data.draw(_AMBIGUOUS_LINE))
    if "bad-line" in damages:
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(_BAD_LINE))
    if "blank-line" in damages:
        lines.insert(data.draw(st.integers(1, len(lines))), "")
    if "duplicate" in damages:
        lines += [">c1", "ACGT"]
    if "empty-record" in damages:
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(_HEADER))
    if "no-header" in damages:
        lines = [line for line in lines if not line.startswith(">")]
    if "lowercase" in damages:
        lines = [line if line.startswith(">") else line.lower() for line in lines]
    newline = "\r\n" if "crlf" in damages else "\r" if "cr-only" in damages else "\n"
    content = (newline.join(lines) + newline).encode("utf-8")
    if "bom" in damages:
        content = b"\xef\xbb\xbf" + content
    if "gzip" in damages:
        content = gzip.compress(content)
    if "gzip-cut" in damages:
        packed = gzip.compress(content)
        content = packed[: data.draw(st.integers(0, max(len(packed) - 1, 0)))]
    if "bgzf" in damages:
        from Bio import bgzf

        with tempfile.NamedTemporaryFile(suffix=".gz") as handle:
            with bgzf.BgzfWriter(handle.name, "wb") as writer:
                writer.write(content)
            content = Path(handle.name).read_bytes()
    if "binary-prefix" in damages:
        content = bytes(data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=16))) + content
    return content


@given(data=st.data())
@settings(max_examples=_examples(25))
def test_markov_on_any_fasta_keeps_the_contract(data) -> None:
    content = _draw_fasta(data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "g.fa"
        path.write_bytes(content)
        code, stderr = _run(["markov", str(path), "--seq-length", "4", "--val-fraction", "0.5", "--max-order", "1",
                             "--json", str(Path(folder) / "out.json")])
        _assert_contract(code, stderr)
        event(f"exit {code}")  # --hypothesis-show-statistics: how many were scored, how many refused
        assert path.read_bytes() == content


# ----------------------------------------------------------------------------- variant tables
GENOME = random_dna(600, 21)
_POSITION = st.one_of(st.integers(-5, 700).map(str), st.sampled_from(["0", "1", "600", "601", "1e3", "x", "", "-"]))
_ALLELE = st.one_of(st.sampled_from(list("ACGTN")), st.text(alphabet="ACGTacgtNX-*.<>", min_size=0, max_size=4))


@st.composite
def variant_line(draw) -> str:
    """A correct substitution most of the time (so tables get scored), else a typical mistake."""
    position = draw(st.integers(1, len(GENOME)))
    ref = GENOME[position - 1]
    fields = ["c1", str(position), ref, draw(st.sampled_from([b for b in "ACGT" if b != ref]))]
    mistake = draw(st.sampled_from(["none"] * 6 + ["contig", "position", "ref", "alt", "columns", "comment"]))
    if mistake == "contig":
        fields[0] = draw(st.sampled_from(["chr9", "", "C1"]))
    elif mistake == "position":
        fields[1] = draw(_POSITION)
    elif mistake == "ref":
        fields[2] = draw(_ALLELE)
    elif mistake == "alt":
        fields[3] = draw(_ALLELE)
    elif mistake == "columns":
        fields = fields[: draw(st.integers(1, 3))]
    elif mistake == "comment":
        fields[0] = "#" + fields[0]
    return draw(st.sampled_from(["\t", "\t", " "])).join(fields)


@pytest.fixture(scope="module")
def scoring_inputs(tmp_path_factory) -> dict[str, Path]:
    import torch

    from biomoe.model.config import ModelConfig
    from biomoe.model.transformer import MoETransformer
    from conftest import save_checkpoint

    folder = tmp_path_factory.mktemp("fuzz")
    fasta = folder / "ref.fa"
    fasta.write_text(">c1\n" + GENOME + "\n")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=2,
                      top_k=1, ffn_hidden_size=16)
    return {"fasta": fasta, "ckpt": save_checkpoint(folder / "m.ckpt", MoETransformer(cfg), cfg)}


@given(lines=st.lists(variant_line(), min_size=0, max_size=5), header=st.booleans())
@settings(max_examples=_examples(30), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                             HealthCheck.too_slow])
def test_any_variant_table_scores_or_is_one_line(scoring_inputs, lines: list[str], header: bool) -> None:
    before = {p: p.read_bytes() for p in scoring_inputs.values()}
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "v.tsv"
        table.write_text(("contig\tposition\tref\talt\n" if header else "") + "\n".join(lines) + "\n")
        text = table.read_bytes()
        out = Path(folder) / "out.tsv"
        code, stderr = _run(["score-variants", str(scoring_inputs["ckpt"]), str(scoring_inputs["fasta"]),
                             "--variants", str(table), "--out", str(out), "--window", "64", "--no-progress"])
        _assert_contract(code, stderr)
        event(f"exit {code}")
        if code == 0:  # a result is a number per variant, never NaN
            rows = out.read_text().splitlines()[1:]
            assert rows and all(math.isfinite(float(row.split("\t")[-1])) for row in rows)
        else:
            assert not out.exists()
        assert table.read_bytes() == text
    assert {p: p.read_bytes() for p in scoring_inputs.values()} == before


# ------------------------------------------------------------------------------- config values
def _tiny_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())


_NUMERIC_KEYS = sorted(key for key in config_checks.RULES if key.split(".")[0] in ("model", "data", "trainer")
                       and key not in ("data.fasta", "trainer.default_root_dir", "data.cache_dir"))
_VALUE = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0, -1, 1, 0.5, 1.0, 2, None, True, False, "", "auto", "abc", [], [0.9], [1, 2, 3],
                                    {"a": 1}]),
                   st.text(max_size=6))


def _set(config: dict, dotted: str, value) -> None:
    node = config
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


@given(key=st.sampled_from(_NUMERIC_KEYS), value=_VALUE)
@settings(max_examples=_examples(400))
@pytest.mark.slow
def test_validation_refuses_with_the_key_or_accepts(key: str, value) -> None:
    config = _tiny_config()
    _set(config, key, value)
    try:
        config_checks.validate_config(config)
    except ConfigError as exc:
        assert str(exc).startswith(key) and "\n" not in str(exc), (key, value, str(exc))


_CLI_VALUES = st.one_of(st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.sampled_from(["nan", "-inf", "x",
                                                                                                  "[1, 2]", "null"]))
_CLI_KEYS = ["model.optim.lr", "model.optim.weight_decay", "model.optim.warmup_steps", "model.config.init_std",
             "model.config.norm_eps", "model.config.rope_theta", "model.config.dropout", "model.config.top_k",
             "data.batch_size", "data.rc_prob", "data.stride", "trainer.max_steps", "trainer.devices",
             "trainer.gradient_clip_val", "trainer.val_check_interval", "trainer.limit_val_batches"]


@given(key=st.sampled_from(_CLI_KEYS), value=_CLI_VALUES)
@settings(max_examples=_examples(14))
@pytest.mark.slow
def test_fit_with_any_value_runs_or_is_one_line(key: str, value) -> None:
    with tempfile.TemporaryDirectory() as folder:
        argv = ["fit", "--config", str(ROOT / "configs/tiny.yaml"), "--data.cache_dir", f"{folder}/cache",
                "--trainer.default_root_dir", f"{folder}/run", "--trainer.logger", "false",
                "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", "--trainer.num_sanity_val_steps", "0",
                "--trainer.val_check_interval", "1", f"--{key}", str(value)]
        code, stderr = _run(argv)
        _assert_contract(code, stderr, ok_codes=(0, 1, 2))  # 1: training diverged (NonFiniteGuard), one line
        event(f"exit {code}")
        if code == 2:
            assert key in stderr.splitlines()[-1], stderr[-1000:]
