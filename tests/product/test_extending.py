"""docs/extending.md works as written: its toy expert backend and toy subcommand run as plug-ins.

The examples are read from the document itself, so the page and the package cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types

import pytest
import torch

from biomoe.build import build_model
from biomoe.errors import ConfigError
from biomoe.model.config import RuntimeConfig
from biomoe.model.moe.experts import (EXPERT_BACKENDS, ExpertBackend, ExpertBackendQuery, Experts, known_backends,
                                      register_expert_backend, resolve_expert_backend)
from conftest import ROOT

DOC = ROOT / "docs" / "extending.md"


def section(title: str) -> str:
    """The text under ``## title`` up to the next ``## `` heading."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def code_blocks(text: str, language: str = "python") -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


# ------------------------------------------------------------------------------ expert backend
@pytest.fixture
def split_backend():
    """Runs the page's example (it registers ``split`` and builds a model with it)."""
    namespace: dict = {"__name__": "extending_example"}
    exec(compile(code_blocks(section("Add an expert backend"))[0], str(DOC), "exec"), namespace)
    yield namespace
    EXPERT_BACKENDS.unregister("split")


def experts_of(model: torch.nn.Module) -> list[Experts]:
    return [m for m in model.modules() if isinstance(m, Experts)]


def outputs_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = model(ids).logits
    logits.float().pow(2).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_model_output(model: torch.nn.Module, reference_backend: str, config) -> None:
    reference = build_model(config, RuntimeConfig(expert_backend=reference_backend), "cpu").model
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    out, grads = outputs_and_grads(model, ids)
    ref_out, ref_grads = outputs_and_grads(reference, ids)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6)


def test_a_backend_named_in_the_config_is_built_and_matches_the_loop_reference(split_backend):
    built = split_backend["built"]
    assert built.selection.paths["experts"] == "split (configured)"
    assert experts_of(built.model) and all(e.backend_name == "split" for e in experts_of(built.model))
    assert_same_model_output(built.model, "loop", split_backend["config"])


def test_auto_takes_the_backend_with_the_top_priority(split_backend):
    spec = EXPERT_BACKENDS.spec("split")
    EXPERT_BACKENDS.register(dataclasses.replace(spec, priority=100))  # same class: replaces the row
    config = split_backend["config"]
    built = build_model(config, RuntimeConfig(expert_backend="auto"), "cpu")
    assert built.selection.paths["experts"] == "split (CPU: one matmul pair per expert)"
    assert all(e.backend_name == "split" for e in experts_of(built.model))
    assert_same_model_output(built.model, "grouped", config)


def test_at_its_own_priority_auto_keeps_grouped(split_backend):
    built = build_model(split_backend["config"], RuntimeConfig(expert_backend="auto"), "cpu")
    assert built.selection.paths["experts"] == "grouped (no CUDA device)"


def test_every_list_of_names_is_the_registry(split_backend):
    from biomoe.cli.run.config_checks import RULES

    assert "split" in known_backends()
    RuntimeConfig(expert_backend="split")  # the config accepts it
    check = RULES["model.runtime.expert_backend"]
    assert check("split") is None
    assert check("warp") == "'warp' is unknown; choose one of " + ", ".join(known_backends())
    with pytest.raises(ConfigError, match="split"):
        RuntimeConfig(expert_backend="warp")


def test_a_backend_named_where_it_cannot_run_is_a_one_line_config_error(split_backend):
    on_a_gpu = ExpertBackendQuery(device=torch.device("cuda"), capability=(9, 0))
    with pytest.raises(ConfigError) as err:
        resolve_expert_backend("split", on_a_gpu)
    assert str(err.value) == "model.runtime.expert_backend: split needs the CPU; use grouped or auto here"


def test_a_second_backend_under_a_taken_name_is_refused(split_backend):
    with pytest.raises(ValueError, match="already registered"):
        @register_expert_backend("split")
        class Other(ExpertBackend):
            pass


def test_the_shipped_table():
    assert {"loop", "grouped", "quack", "te", "te_fused"} <= set(EXPERT_BACKENDS.names())
    assert [s.name for s in EXPERT_BACKENDS.by_priority()][:4] == ["te_fused", "te", "quack", "grouped"]
    assert EXPERT_BACKENDS.spec("loop").priority is None
    assert resolve_expert_backend("auto", ExpertBackendQuery()) == ("grouped", "no CUDA device")
    with pytest.raises(ConfigError) as err:
        resolve_expert_backend("te", ExpertBackendQuery())
    assert str(err.value) == ("model.runtime.expert_backend: te needs Transformer Engine and a CUDA GPU "
                              "(pip install biomoe[te]); use grouped or auto here")


# ---------------------------------------------------------------------------------- subcommand
def add_row(monkeypatch: pytest.MonkeyPatch, name: str, command) -> None:
    """One row in ``COMMANDS``, as it reads once ``biomoe.cli.commands`` is imported (the tables
    derived from it included)."""
    from biomoe.cli import commands

    monkeypatch.setitem(commands.COMMANDS, name, command)
    monkeypatch.setitem(commands.EXTRA_COMMANDS, name, command.target)
    monkeypatch.setitem(commands.COMMAND_SUMMARIES, name, command.summary)


@pytest.fixture
def revcomp(monkeypatch):
    """The page's row and module, installed as ``biomoe/cli/revcomp.py`` would be."""
    from biomoe.cli.commands import Command

    text = section("Add a subcommand")
    row, source = code_blocks(text)
    ((name, command),) = eval("{" + row + "}", {"Command": Command}).items()
    module_name = command.target.split(":")[0]
    module = types.ModuleType(module_name)
    exec(compile(source, str(DOC), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module_name, module)
    add_row(monkeypatch, name, command)
    return name, code_blocks(text, language="text")[0].strip()


def test_a_subcommand_is_one_row_and_one_module(revcomp, capsys):
    from biomoe.cli.main import main

    name, _ = revcomp
    assert name == "revcomp"
    assert main(["revcomp", "ACGTT", "aacg"]) == 0
    assert capsys.readouterr().out.split() == ["AACGT", "cgtt"]


def test_its_errors_are_the_one_line_the_page_shows(revcomp, capsys):
    from biomoe.cli.main import main

    _, shown = revcomp
    assert main(["revcomp", "ACGU"]) == 2
    assert capsys.readouterr().err.strip() == shown
    assert main(["revcomp", "--bogus", "ACGT"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("biomoe: error: revcomp: ") and err.count("\n") == 1
