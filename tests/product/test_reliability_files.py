"""No output over an input, every write atomic with the umask's permissions.

The same file is recognised by real path (symlinks) and by inode (hard links); each command that
writes refuses such an ``--out`` with one line, before its work, and leaves the input byte for
byte as it was. Writes go through one atomic writer: an exception (or Ctrl-C) mid-write leaves
the previous file and no temporary file behind.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from biomoe import files, output_checks
from biomoe.errors import GenomeInputError
from biomoe.model.config import ModelConfig
from biomoe.model.transformer import MoETransformer
from biomoe.cli.main import main
from conftest import ROOT, error_line as _error_line, random_dna, save_checkpoint

TINY_MODEL = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2,
                  ffn_hidden_size=32)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A genome, a variant table on it, and a checkpoint of the tiny model."""
    genome = random_dna(3000, 7)
    fasta = tmp_path / "ref.fa"
    fasta.write_text(">c1\n" + genome + "\n")
    variants = tmp_path / "variants.tsv"
    variants.write_text(f"contig\tposition\tref\talt\nc1\t100\t{genome[99]}\t{'A' if genome[99] != 'A' else 'C'}\n")
    torch.manual_seed(0)
    cfg = ModelConfig(**TINY_MODEL)
    ckpt = save_checkpoint(tmp_path / "model.ckpt", MoETransformer(cfg), cfg)
    return {"fasta": fasta, "variants": variants, "ckpt": ckpt}


def _snapshot(paths) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in paths}


# ------------------------------------------------------------------------------------- the guard
def test_same_file_through_symlink_and_hardlink(tmp_path: Path) -> None:
    real = tmp_path / "genome.fa"
    real.write_text(">a\nACGT\n")
    link = tmp_path / "link.fa"
    link.symlink_to(real)
    hard = tmp_path / "hard.fa"
    os.link(real, hard)
    other = tmp_path / "other.fa"
    other.write_text(">a\nACGT\n")  # same content, different file
    same = output_checks.same_file
    assert same(real, link) and same(real, hard) and same(link, hard)
    assert same(real, tmp_path / "." / "genome.fa")
    assert not same(real, other)
    assert not same(real, tmp_path / "missing.fa")
    for alias in (link, hard, tmp_path / "sub" / ".." / "genome.fa"):
        with pytest.raises(GenomeInputError, match="is also an input"):
            output_checks.check_not_input(alias, [real])
    output_checks.check_not_input(other, [real])


def test_atomic_write_refuses_registered_inputs(tmp_path: Path) -> None:
    source = tmp_path / "in.fa"
    source.write_text(">a\nACGT\n")
    with output_checks.input_scope():
        output_checks.protect_inputs([tmp_path])  # a folder protects the files in it
        with pytest.raises(GenomeInputError, match="is also an input"):
            files.write_text(tmp_path / "in.fa", "x")
        with pytest.raises(GenomeInputError, match="is also an input"):
            with files.atomic_path(tmp_path / "in.fa") as tmp:
                tmp.write_text("x")
    assert source.read_text() == ">a\nACGT\n"
    files.write_text(tmp_path / "in.fa", "allowed once the command has ended\n")  # the scope is over


# ----------------------------------------------------------------------------------- the writer
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_take_permissions_from_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        files.write_text(tmp_path / "a.txt", "x")
        with files.atomic_path(tmp_path / "b.npz") as tmp:
            tmp.write_bytes(b"x")
        from biomoe.checkpoint.save import atomic_torch_save

        atomic_torch_save({"w": torch.ones(2)}, tmp_path / "c.ckpt")
    finally:
        os.umask(old)
    for name in ("a.txt", "b.npz", "c.ckpt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_failed_write_keeps_the_previous_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.tsv"
    target.write_text("previous\n")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with files.atomic_write(target) as handle:
            handle.write("half of the new")
            raise RuntimeError("disk on fire")
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tsv"]


def test_interrupted_torch_save_is_a_keyboard_interrupt(tmp_path: Path, monkeypatch) -> None:
    """torch's zip writer, interrupted while it calls back into Python, raises a RuntimeError about
    file positions; the writer turns it back into the Ctrl-C it was."""
    from biomoe.checkpoint.save import atomic_torch_save

    target = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1}, target)
    before = target.read_bytes()

    class Interrupting:
        def __init__(self, handle) -> None:
            self.handle = handle

        def write(self, data):
            raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(self.handle, name)

    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, handle: real_save(obj, Interrupting(handle)))
    with pytest.raises(KeyboardInterrupt):
        atomic_torch_save({"step": 2, "w": torch.ones(1000)}, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_write_through_a_symlink_replaces_its_target(tmp_path: Path) -> None:
    real = tmp_path / "results" / "table.tsv"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "table.tsv"
    link.symlink_to(real)
    files.write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "FILE"
    blocker.write_text("x")
    with pytest.raises(GenomeInputError, match=r"FILE/out.json: cannot write output \(File exists: .*FILE\)"):
        files.write_text(blocker / "out.json", "{}")
    with pytest.raises(GenomeInputError, match="is a folder"):
        files.write_text(tmp_path, "{}")


# ------------------------------------------------------------------------------ every command
def _commands(inputs: dict[str, Path], tmp_path: Path) -> dict[str, tuple[list[str], Path]]:
    """command -> (argv whose output names an input, the input it names)."""
    fasta, variants, ckpt = str(inputs["fasta"]), str(inputs["variants"]), str(inputs["ckpt"])
    link = tmp_path / "link-to-ref.fa"
    link.symlink_to(inputs["fasta"])
    hard = tmp_path / "hard-link-to-variants.tsv"
    os.link(inputs["variants"], hard)
    (tmp_path / "scores.tsv").symlink_to(inputs["ckpt"])
    hf_dir = tmp_path / "hf"
    return {
        "score-variants --out FASTA": (["score-variants", ckpt, fasta, "--variants", variants, "--out", fasta],
                                       inputs["fasta"]),
        "score-variants --out VARIANTS (hard link)": (["score-variants", ckpt, fasta, "--variants", variants,
                                                       "--out", str(hard)], inputs["variants"]),
        "score-variants --out CKPT": (["score-variants", ckpt, fasta, "--variants", variants, "--out", ckpt],
                                      inputs["ckpt"]),
        "score-fasta --out PREFIX whose .tsv links to the checkpoint": (
            ["score-fasta", ckpt, fasta, "--out", str(tmp_path / "scores")], inputs["ckpt"]),
        "markov --json FASTA (symlink)": (["markov", fasta, "--seq-length", "64", "--max-order", "2",
                                           "--json", str(link)], inputs["fasta"]),
        "repeat-mix --plot FASTA": (["repeat-mix", fasta, "--seq-length", "64", "--plot", fasta], inputs["fasta"]),
        "repeat-mix --json CKPT": (["repeat-mix", fasta, "--ckpt", ckpt, "--seq-length", "64", "--json", ckpt],
                                   inputs["ckpt"]),
        "export-hf into the checkpoint's name": (["export-hf", ckpt, str(hf_dir)], hf_dir / "model.safetensors"),
        "import-hf over a shard": (["import-hf", str(hf_dir), str(hf_dir / "model.safetensors")],
                                   hf_dir / "model.safetensors"),
    }


def test_no_command_writes_over_an_input(inputs: dict[str, Path], tmp_path: Path, capsys) -> None:
    commands = _commands(inputs, tmp_path)
    # export-hf case: the folder already holds the checkpoint under the name export-hf writes
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    os.link(inputs["ckpt"], hf_dir / "model.safetensors")
    (hf_dir / "config.json").write_text("{}")
    protected = [inputs["fasta"], inputs["variants"], inputs["ckpt"], hf_dir / "config.json"]
    for name, (argv, _) in commands.items():
        before = _snapshot(protected)
        assert main(argv) == 2, name
        line = _error_line(capsys.readouterr().err)
        assert "is also an input" in line and "never writes over an input" in line, (name, line)
        assert _snapshot(protected) == before, name
        leftovers = [p for p in tmp_path.rglob(".*.tmp*")]
        assert not leftovers, (name, leftovers)


def test_commands_write_atomically_where_they_are_allowed_to(inputs: dict[str, Path], tmp_path: Path,
                                                               capsys) -> None:
    out = tmp_path / "out" / "scores"
    assert main(["score-variants", str(inputs["ckpt"]), str(inputs["fasta"]), "--variants", str(inputs["variants"]),
                 "--out", str(out.with_suffix(".tsv")), "--no-progress"]) == 0
    assert main(["export-hf", str(inputs["ckpt"]), str(tmp_path / "hf")]) == 0
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back.ckpt")]) == 0
    capsys.readouterr()
    mode = 0o666 & ~_umask()
    for path in (out.with_suffix(".tsv"), tmp_path / "hf" / "model.safetensors", tmp_path / "hf" / "config.json",
                 tmp_path / "back.ckpt"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert not list(tmp_path.rglob(".*.tmp*"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_fit_does_not_overwrite_its_config(tmp_path: Path, capsys) -> None:
    """With trainer.logger false the run's config.yaml goes to default_root_dir: a --config living
    there was rewritten by the run reading it."""
    root = ROOT
    run = tmp_path / "run"
    run.mkdir()
    config = run / "config.yaml"
    config.write_text((root / "configs/tiny.yaml").read_text())
    before = config.read_bytes()
    code = main(["fit", "--config", str(config), "--data.fasta", str(root / "data/lambda_virus.fa.gz"),
                 "--data.cache_dir", str(tmp_path / "cache"), "--trainer.default_root_dir", str(run),
                 "--trainer.logger", "false", "--trainer.max_steps", "1"])
    assert code == 2
    assert "config.yaml: is also an input" in _error_line(capsys.readouterr().err)
    assert config.read_bytes() == before


def test_import_hf_cut_off_mid_write_keeps_the_previous_checkpoint(inputs: dict[str, Path], tmp_path: Path,
                                                                   capsys, monkeypatch) -> None:
    """import-hf wrote with a plain torch.save: killed mid-write, it left a 0-byte or truncated file
    where the previous checkpoint was."""
    from biomoe.interop.hf import import_hf

    assert main(["export-hf", str(inputs["ckpt"]), str(tmp_path / "hf")]) == 0
    out = tmp_path / "imported.ckpt"
    assert main(["import-hf", str(tmp_path / "hf"), str(out)]) == 0
    capsys.readouterr()
    before = out.read_bytes()
    real_save = torch.save

    def dies_half_way(obj, handle, *args, **kwargs):
        handle.write(before[: len(before) // 2])
        raise SystemExit("killed")  # what the process sees of a kill is that it never finishes

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(SystemExit):
        import_hf(tmp_path / "hf", out)
    monkeypatch.setattr(torch, "save", real_save)
    assert out.read_bytes() == before
    assert not list(tmp_path.glob(".imported.ckpt.*"))


@pytest.mark.parametrize("raw, problem", [
    (b"\x1f\x8b\x08\x00", "is gzip-compressed, not a YAML config"),
    (b"key: 1\n\xff\n", "not a YAML config (not UTF-8 text: byte 0xff at offset 7)"),
    (b"key: 1\x00\n", "not a YAML config (binary content)"),
])
def test_user_text_files_are_refused_in_one_line_naming_the_problem(raw, problem):
    from biomoe.errors import GenomeInputError
    from biomoe.user_text import decode_user_text

    with pytest.raises(GenomeInputError) as info:
        decode_user_text(raw, "run.yaml", "a YAML config")
    assert str(info.value) == f"run.yaml: {problem}"


def test_user_text_drops_a_spreadsheet_byte_order_mark():
    from biomoe.user_text import decode_user_text

    assert decode_user_text("\ufeffchr\t10\tA\tC\n".encode("utf-8"), "v.tsv", "a text table") == "chr\t10\tA\tC\n"


def test_a_replaced_output_is_named_only_once_the_command_has_succeeded(inputs: dict[str, Path],
                                                                         tmp_path: Path, capsys) -> None:
    out = tmp_path / "effects.tsv"
    argv = ["score-variants", str(inputs["ckpt"]), str(inputs["fasta"]), "--variants", str(inputs["variants"]),
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "note: replac" not in capsys.readouterr().out  # nothing was there before
    earlier = out.read_bytes()
    wrong_ref = tmp_path / "wrong.tsv"
    line = inputs["variants"].read_text().splitlines()[1].split("\t")
    line[2], line[3] = line[3], "G" if line[3] != "G" else "T"  # a REF the genome does not have
    wrong_ref.write_text("contig\tposition\tref\talt\n" + "\t".join(line) + "\n")
    failing = argv[:4] + [str(wrong_ref)] + argv[5:]
    assert main(failing) == 2
    captured = capsys.readouterr()
    assert "note: replac" not in captured.out + captured.err  # the earlier output stays, and nothing says so
    assert out.read_bytes() == earlier
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"biomoe: note: replaced {out} (the earlier output)"
