"""One discoverable CLI: every subcommand in --help, option descriptions, no broken optimizer flags."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from biomoe.data.datamodule import GenomeDataModule
from biomoe.model.config import ModelConfig, OptimConfig
from biomoe.cli.commands import COMMAND_SUMMARIES, EXTRA_COMMANDS
from biomoe.cli.main import main

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _help(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _option_help(text: str, option: str) -> str:
    """The description argparse prints for ``option`` (up to the next option line)."""
    match = re.search(rf"^  {re.escape(option)}\b.*?\n(.*?)(?=^  -|\Z)", text, re.M | re.S)
    assert match, f"{option} is not in the help"
    first_line = text[match.start():text.index("\n", match.start())]
    own = first_line.split(None, 2)[2] if len(first_line.split(None, 2)) > 2 else ""
    return " ".join((own + " " + match.group(1)).split())


def test_top_level_help_lists_every_subcommand_with_a_description(capsys):
    text = _help(capsys, ["--help"])
    commands = (*LIGHTNING_COMMANDS, *EXTRA_COMMANDS)
    assert {"generate", "embed"} <= set(EXTRA_COMMANDS) and set(COMMAND_SUMMARIES) == set(commands)
    for name in commands:
        line = next((line for line in text.splitlines() if line.split()[:1] == [name]), None)
        assert line is not None, f"{name} missing from --help"
        assert line.split(None, 1)[1] == COMMAND_SUMMARIES[name]  # the description fits on its line


def test_unknown_subcommand_error_lists_them_all(capsys):
    assert main(["genrate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biomoe: error:") and "\n" not in err
    for name in (*LIGHTNING_COMMANDS, *EXTRA_COMMANDS):
        assert f"'{name}'" in err


def test_every_config_field_has_a_description():
    for cls in (ModelConfig, OptimConfig):
        import docstring_parser

        documented = {p.arg_name: p.description for p in docstring_parser.parse_from_object(cls).params}
        missing = [f.name for f in dataclasses.fields(cls) if not documented.get(f.name)]
        assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_fit_help_describes_data_and_model_options_and_offers_no_dead_optimizer_flags(capsys):
    text = _help(capsys, ["fit", "--help"])
    for name in inspect.signature(GenomeDataModule.__init__).parameters:
        if name != "self":
            description = _option_help(text, f"--data.{name}")
            assert description.split("(type:")[0].strip(), f"--data.{name} has no description"
    assert "--model.config.help" in text
    assert "--optimizer" not in text and "--lr_scheduler" not in text
    config_help = _help(capsys, ["fit", "--model.config.help", "ModelConfig"])
    assert "Width of the residual stream" in _option_help(config_help, "--model.config.hidden_size")


def test_optimizer_flag_is_refused_in_one_line(capsys):
    assert main(["fit", "--optimizer", "torch.optim.SGD"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biomoe: error:") and "optimizer" in err and "\n" not in err


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_every_extra_subcommand_reports_a_bad_option_in_one_line(command, capsys):
    code = main([command, "--no-such-option"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(f"biomoe: error: {command}: "), err
    assert "--no-such-option" in err or "arguments are required" in err, err  # argparse reports missing ones first
    assert len(err.splitlines()) == 1 and "usage:" not in err, err


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_every_extra_subcommand_keeps_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and f"usage: biomoe {command}" in capsys.readouterr().out


# A measured figure in help text goes stale with the next GPU or library release; docs/ hold them.
MEASURED = re.compile(r"\d[\d.,]*\s?(ms|TFLOP/s|tokens/s|SNVs/s)\b|\bon an? [HBA]\d{2,3}\b|measured (faster|slower)"
                      r"|\d+(\.\d+)?\s?(×|x faster)|about a minute")


def test_config_field_descriptions_quote_no_measured_timings():
    import docstring_parser

    from biomoe.model.config import RuntimeConfig

    for cls in (ModelConfig, OptimConfig, RuntimeConfig):
        for param in docstring_parser.parse_from_object(cls).params:
            found = MEASURED.search(" ".join((param.description or "").split()))
            assert found is None, f"{cls.__name__}.{param.arg_name} quotes {found.group(0)!r}: move it to docs/"


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_subcommand_help_quotes_no_measured_timings(command, capsys):
    text = " ".join(_help(capsys, [command, "--help"]).split())
    found = MEASURED.search(text)
    assert found is None, f"{command} --help quotes {found.group(0)!r}: move it to docs/"

