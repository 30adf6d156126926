"""``cli.py --help`` lists the commands, and biomoe's own commands print their ``--help``, without
importing torch or Lightning (start-up time: those two take seconds to import;
scripts/bench_startup.py measures it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from biomoe.cli.commands import EXTRA_COMMANDS
from conftest import ROOT as REPO

HEAVY = ("torch", "lightning", "jsonargparse", "transformer_engine", "transformers", "matplotlib")


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter, from the repository root."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


def modules_imported_by(args: list[str], env: dict[str, str] | None = None,
                        timeout: int = 120) -> tuple[str, set[str]]:
    """stdout of ``cli.py ARGS`` (run as a script in a fresh interpreter) and the top-level
    modules it imported."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['cli.py', *{args!r}]\n"
            "try:\n"
            "    runpy.run_path('cli.py', run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (0, None), exc.code\n"
            "print('@@' + ' '.join(sorted({name.split('.')[0] for name in sys.modules})))\n")
    done = run_python(code, env, timeout)
    assert done.returncode == 0, done.stderr
    out, _, names = done.stdout.rpartition("@@")
    return out, set(names.split())


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_the_command_list_imports_neither_torch_nor_lightning(flag):
    out, imported = modules_imported_by([flag])
    assert "score-fasta" in out and "fit" in out
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


@pytest.mark.parametrize("command", sorted(EXTRA_COMMANDS))
def test_the_help_of_biomoes_own_commands_imports_no_torch(command):
    out, imported = modules_imported_by([command, "--help"])
    assert f"usage: biomoe {command}" in out
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_importing_the_package_imports_no_torch():
    code = "import sys, biomoe, biomoe.cli.main; print(' '.join(m for m in sys.modules if m.split('.')[0] in %r))" % (
        HEAVY,)
    done = run_python(code)
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr


def test_the_package_names_still_resolve_and_every_shipped_backend_is_registered():
    code = ("import sys, biomoe\n"
            "from biomoe.model.config import RuntimeConfig\n"
            "assert 'biomoe.backends' not in sys.modules\n"
            "RuntimeConfig(expert_backend='te_fused')\n"  # valid without importing biomoe.backends first
            "from biomoe.model.moe.experts import EXPERT_BACKENDS\n"
            "assert {'loop', 'grouped', 'te', 'te_fused'} <= set(EXPERT_BACKENDS.names())\n"
            "from biomoe import ConfigError, ModelConfig, MoETransformer\n"
            "assert ConfigError is __import__('biomoe.errors').errors.ConfigError\n")
    done = run_python(code)
    assert done.returncode == 0, done.stderr


def test_embed_offers_the_pools_the_inference_module_computes():
    from biomoe.cli.embed import POOLS
    from biomoe.inference.embed import POOLS as COMPUTED

    assert POOLS == COMPUTED


def run_help(command: str, cache: Path) -> tuple[str, set[str]]:
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "100"}
    return modules_imported_by([command, "--help"], env, timeout=300)


@pytest.mark.slow
def test_a_lightning_commands_help_is_built_once_then_printed_without_lightning(tmp_path):
    first, imported_first = run_help("validate", tmp_path)
    again, imported_again = run_help("validate", tmp_path)
    assert "--trainer.max_steps" in first and "lightning" in imported_first
    assert again == first
    assert not imported_again & set(HEAVY), sorted(imported_again & set(HEAVY))
    # The first miss stored the other Lightning commands' help as well.
    sibling, imported_sibling = run_help("predict", tmp_path)
    assert "--trainer.max_steps" in sibling and sibling != first
    assert not imported_sibling & set(HEAVY), sorted(imported_sibling & set(HEAVY))


def test_the_help_cache_key_follows_the_code_the_width_and_the_command(tmp_path, monkeypatch):
    from biomoe.cli import help_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    help_cache.store_help(["fit", "--help"], "usage: fit ...\n")
    assert help_cache.cached_help(["fit", "--help"]) == "usage: fit ...\n"
    assert help_cache.cached_help(["test", "--help"]) is None
    monkeypatch.setenv("COLUMNS", "60")
    assert help_cache.cached_help(["fit", "--help"]) is None  # argparse wraps to the width
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(help_cache, "_source_signature", lambda: iter(["biomoe/model/config.py:1:2"]))
    assert help_cache.cached_help(["fit", "--help"]) is None  # an edited docstring is new help
    monkeypatch.setenv("BIOMOE_HELP_CACHE", "0")
    help_cache.store_help(["fit", "--help"], "other\n")
    assert help_cache.cached_help(["fit", "--help"]) is None


def test_only_a_bare_help_request_is_cached():
    from biomoe.cli.help_cache import is_help_request

    assert is_help_request(["fit", "--help"]) and is_help_request(["predict", "-h"])
    assert not is_help_request(["fit", "--config", "genome", "--help"])
