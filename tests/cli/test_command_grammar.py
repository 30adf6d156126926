"""Every command that runs a model takes it as ``--ckpt_path`` (Lightning's name), the positional
form kept as an alias; both spellings give the same result."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from biomoe.cli.commands import EXTRA_COMMANDS
from biomoe.cli.main import main as cli_main
from biomoe.model.transformer import MoETransformer
from conftest import error_line, random_dna, save_checkpoint


@pytest.fixture
def files(tiny_config, tmp_path, write_fasta):
    torch.manual_seed(0)
    cfg = tiny_config()
    ckpt = save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg, data={"seq_length": 32})
    seq = random_dna(120, seed=3)
    fasta = write_fasta({"c": seq})
    variants = tmp_path / "v.tsv"
    variants.write_text(f"c\t10\t{seq[9]}\t{'A' if seq[9] != 'A' else 'C'}\n")
    return ckpt, fasta, variants


COMMANDS = {
    "score-fasta": lambda f, out: ([str(f[1]), "--out", str(out / "s")], out / "s.tsv"),
    "embed": lambda f, out: ([str(f[1]), "--out", str(out / "e.npz")], out / "e.npz"),
    "score-variants": lambda f, out: ([str(f[1]), "--variants", str(f[2]), "--out", str(out / "v.tsv")],
                                      out / "v.tsv"),
    "generate": lambda f, out: (["--length", "5", "--out", str(out / "g.fa")], out / "g.fa"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ckpt_path_and_the_positional_checkpoint_are_the_same_command(command, files, tmp_path, capsys):
    outputs = []
    for spelling in ("positional", "option"):
        out = tmp_path / spelling
        out.mkdir()
        rest, written = COMMANDS[command](files, out)
        model = [str(files[0])] if spelling == "positional" else ["--ckpt_path", str(files[0])]
        assert cli_main([command, *model, *rest, "--device", "cpu", "--no-progress"]) == 0
        outputs.append(written.read_bytes())
    capsys.readouterr()
    if command != "embed":  # embed's .npz holds the same arrays; its zip timestamps differ
        assert outputs[0] == outputs[1]


def test_repeat_mix_takes_the_model_first_as_the_other_commands_do(files, tmp_path, capsys, write_fasta):
    """Its model is optional (an order-k Markov base without one), so a first input that is a
    checkpoint or run folder is the model, and two genomes stay two genomes."""
    ckpt, fasta, _ = files
    first = ["repeat-mix", str(ckpt), str(fasta), "--seq-length", "32", "--val-fraction", "0.5", "--out",
             str(tmp_path / "a.json")]
    option = ["repeat-mix", str(fasta), "--ckpt_path", str(ckpt), "--seq-length", "32", "--val-fraction", "0.5",
              "--out", str(tmp_path / "b.json")]
    assert cli_main(first) == 0 and cli_main(option) == 0
    capsys.readouterr()
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a["base"] == b["base"] == str(ckpt) and a["fasta"] == b["fasta"] == [str(fasta)]
    assert a["mixed_bits_per_base"] == b["mixed_bits_per_base"]
    assert cli_main(["repeat-mix", str(ckpt), str(fasta), "--val-fraction", "0.5",
                     "--out", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["seq_length"] == 32  # the checkpoint's training length
    other = write_fasta({"d": random_dna(200, seed=8)}, name="other.fa")
    assert cli_main(["repeat-mix", str(fasta), str(other), "--seq-length", "32", "--val-fraction", "0.5",
                     "--out", str(tmp_path / "c.json")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["fasta"] == [str(fasta), str(other)] and "Markov" in c["base"]


def test_a_checkpoint_given_twice_or_not_at_all_is_one_line(files, tmp_path, capsys):
    ckpt = str(files[0])
    assert cli_main(["generate", ckpt, "--ckpt_path", ckpt, "--out", str(tmp_path / "g.fa")]) == 2
    assert "given twice" in error_line(capsys.readouterr().err)
    assert cli_main(["score-fasta", "--out", str(tmp_path / "s")]) == 2
    assert "the model is missing" in error_line(capsys.readouterr().err)
    assert cli_main(["score-fasta", "--ckpt_path", ckpt, "--out", str(tmp_path / "s")]) == 2
    assert "required: fasta" in error_line(capsys.readouterr().err)


def test_export_hf_takes_ckpt_path_too(files, tmp_path, capsys):
    pytest.importorskip("safetensors")
    assert cli_main(["export-hf", "--ckpt_path", str(files[0]), str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "config.json").is_file()
    assert cli_main(["export-hf", "--ckpt_path", str(files[0])]) == 2
    assert "required: --out" in error_line(capsys.readouterr().err)


@pytest.mark.parametrize("command, usage", [("export-hf", "[CKPT] [OUT]"), ("import-hf", "hf_dir [OUT]")])
def test_a_conversion_shows_its_positional_destination_as_the_readme_writes_it(command, usage, capsys):
    """README writes ``export-hf CKPT hf_model/`` and ``import-hf hf_model/ back.ckpt``: --help shows
    that spelling beside ``--out``."""
    text, options = _options_in_help(command, capsys)
    assert usage in " ".join(text.split("\n\n")[0].split()), text
    assert "--out" in options and re.search(r"^  OUT +the (folder|checkpoint) to write", text, re.M), text


WINDOW_OPTIONS = {  # command -> (its window option, the rest of its command line under folder ``out``)
    "score-fasta": ("--window", lambda ckpt, fasta, out: [ckpt, fasta, "--out", f"{out}/s", "--device", "cpu"]),
    "embed": ("--window", lambda ckpt, fasta, out: [ckpt, fasta, "--out", f"{out}/e.npz", "--device", "cpu"]),
    "generate": ("--context", lambda ckpt, fasta, out: [ckpt, "--length", "5", "--out", f"{out}/g.fa",
                                                        "--device", "cpu"]),
    "routing": ("--seq-length", lambda ckpt, fasta, out: [ckpt, fasta, "--windows", "2", "--no-plot",
                                                          "--out", f"{out}/r.json", "--device", "cpu"]),
    "repeat-mix": ("--seq-length", lambda ckpt, fasta, out: [ckpt, fasta, "--out", f"{out}/m.json"]),
    "markov": ("--seq-length", lambda ckpt, fasta, out: ["--ckpt_path", ckpt, "--max-order", "1",
                                                         "--out", f"{out}/k.json"]),
}


@pytest.mark.parametrize("command", sorted(WINDOW_OPTIONS))
def test_every_window_option_defaults_and_warns_by_one_rule(tiny_config, command, tmp_path, write_fasta, capsys):
    """A window past the training length gets the same warning whichever command reads it, and a
    window of one base the same refusal."""
    torch.manual_seed(0)
    cfg = tiny_config(num_layers=1)
    fasta = write_fasta({"c": random_dna(1200, seed=5)})
    ckpt = save_checkpoint(tmp_path / "m.ckpt", MoETransformer(cfg), cfg,
                           data={"fasta": str(fasta), "seq_length": 32, "val_fraction": 0.5})
    option, rest = WINDOW_OPTIONS[command]
    progress = ["--no-progress"] if command not in ("repeat-mix", "markov") else []
    assert cli_main([command, *rest(str(ckpt), str(fasta), tmp_path), option, "64", *progress]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("biomoe: warning:")]
    assert f"biomoe: warning: {option} 64 is longer than the 32 bases the model was trained on: positions " \
           f"past 32 are ones it never saw" in " ".join(warned), warned
    assert cli_main([command, *rest(str(ckpt), str(fasta), tmp_path / "x"), option, "1", *progress]) == 2
    assert f"{option} 1: every base would be read with no context" in error_line(capsys.readouterr().err)


def test_score_fasta_windows_default_to_the_training_length(files, tmp_path, capsys):
    import numpy as np

    ckpt, fasta, _ = files  # trained at seq_length 32
    runs = {}
    for name, extra in (("default", []), ("w32", ["--window", "32"]), ("w1024", ["--window", "1024"])):
        assert cli_main(["score-fasta", "--ckpt_path", str(ckpt), str(fasta), "--out", str(tmp_path / name),
                         "--per-base", "--device", "cpu", "--no-progress", *extra]) == 0
        runs[name] = np.load(tmp_path / f"{name}.npz")["c"]
    capsys.readouterr()
    np.testing.assert_array_equal(runs["default"], runs["w32"])
    assert not np.array_equal(runs["default"], runs["w1024"])  # a fresh context every 32 bases


@pytest.mark.parametrize("device, problem", [("gpu", "is not a device"), ("cuda:99", "cuda:99: ")])
def test_a_device_this_machine_lacks_is_one_line_naming_the_option(files, tmp_path, capsys, device, problem):
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 99:
        pytest.skip("this machine has a hundred GPUs")
    ckpt, fasta, _ = files
    assert cli_main(["score-fasta", str(ckpt), str(fasta), "--out", str(tmp_path / "s"), "--device", device]) == 2
    line = error_line(capsys.readouterr().err)
    assert "argument --device" in line and problem in line


def test_a_generation_larger_than_memory_is_refused_before_it_starts(files, tmp_path, capsys):
    ckpt = str(files[0])
    assert cli_main(["generate", ckpt, "--out", str(tmp_path / "samples.fa"), "--length", str(10 ** 12),
                     "--device", "cpu"]) == 2
    assert "more than this machine's" in error_line(capsys.readouterr().err)
    assert not (tmp_path / "samples.fa").exists()


@pytest.mark.parametrize("command", ["score-fasta", "embed", "score-variants"])
def test_a_window_beyond_the_machine_is_one_line_before_any_work(command, files, tmp_path, capsys, write_fasta):
    """One window is one forward pass: a window no machine holds names --window at once, and
    nothing is written."""
    out = tmp_path / "out"
    out.mkdir()
    seq = random_dna(120, seed=3) + random_dna(300_000, seed=4)  # the fixture's variant still matches
    long_fasta = write_fasta({"c": seq}, name="long.fa")
    rest, written = COMMANDS[command]((files[0], long_fasta, files[2]), out)
    code = cli_main([command, "--ckpt_path", str(files[0]), *rest, "--window", "300120", "--device", "cpu",
                     "--no-progress"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "--window 300,120: one window needs at least" in line, line
    assert not written.exists()


def _options_in_help(command: str, capsys) -> tuple[str, set[str]]:
    try:
        cli_main([command, "--help"])
    except SystemExit:
        pass
    text = capsys.readouterr().out
    return text, set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_every_command_reads_inputs_positionally_writes_out_and_spells_options_with_dashes(command, capsys):
    """One grammar: inputs positional, the output ``--out``, options with dashes (``--ckpt_path`` is
    Lightning's own name, kept for every command that loads a model)."""
    text, options = _options_in_help(command, capsys)
    assert text.startswith(f"usage: biomoe {command}"), text[:200]
    assert {o for o in options if "_" in o} <= {"--ckpt_path"}, options
    assert not options & {"--fasta", "--json", "--seq_length"}, options
    usage = text.split("\n\n")[0]
    # no output under an internal name (a conversion's positional destination is shown as OUT or DEST)
    assert not re.search(r"\b(out_dir|out_ckpt|dest)\b", usage), usage
    assert "--out" in options, options  # recipes copy --out DEST too


def test_earlier_spellings_are_still_accepted(files, tmp_path, write_fasta, capsys):
    fasta = write_fasta({"c1": random_dna(3000, seed=1), "c2": random_dna(3000, seed=2)}, name="two.fa")
    results = []
    for flags in (["--out", str(tmp_path / "new.json"), "--seq-length", "64"],
                  ["--json", str(tmp_path / "old.json"), "--seq_length", "64"]):
        assert cli_main(["markov", str(fasta), "--max-order", "2", *flags]) == 0
        results.append(json.loads(Path(flags[1]).read_text())["rows"])
    assert results[0] == results[1]
    ckpt, genome, _ = files
    for spelling in (["--ckpt_path", str(ckpt), str(genome), "--seq-length", "32", "--batch-size", "2",
                      "--no-plot", "--no-progress", "--out", str(tmp_path / "r_new.json")],
                     ["--ckpt_path", str(ckpt), "--fasta", str(genome), "--seq_length", "32", "--batch_size", "2",
                      "--no_plot", "--no_progress", "--out", str(tmp_path / "r_old.json")]):
        assert cli_main(["routing", *spelling, "--windows", "2", "--device", "cpu"]) == 0
    new, old = (json.loads((tmp_path / name).read_text()) for name in ("r_new.json", "r_old.json"))
    assert new["genomes"] == old["genomes"]
    out = tmp_path / "sample.fa"
    assert cli_main(["generate", str(ckpt), str(genome), "--prompt-region", "c:1-10", "--length", "4",
                     "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    assert "prompt=c:1-10" in out.read_text()
    capsys.readouterr()
