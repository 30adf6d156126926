"""The shipped recipes: every config in configs/ runs on a CPU, and travels with the package.

``--config NAME`` reads the packaged recipe of that name; ``biomoe recipes`` lists and copies them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from setuptools import find_packages

from biomoe.cli import recipes
from biomoe.cli.main import main
from conftest import ROOT

LAMBDA = ROOT / "data/lambda_virus.fa.gz"
CONFIGS = sorted(p.relative_to(ROOT / "configs").with_suffix("").as_posix()
                 for p in (ROOT / "configs").rglob("*.yaml"))


# ---------------------------------------------------------------------------------------------
# Recipe names on the command line
# ---------------------------------------------------------------------------------------------
def test_every_config_is_a_recipe():
    assert CONFIGS and list(recipes.available_recipes()) == CONFIGS
    assert {"genome", "tiny", "ecoli-variants/ecoli-v2-wd1-ema"} <= set(CONFIGS)


def test_a_recipe_name_becomes_its_path_in_either_option_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    genome = str(recipes.recipe_path("genome"))
    assert Path(genome).read_text() == (ROOT / "configs/genome.yaml").read_text()
    assert recipes.expand_recipe_names(["fit", "--config", "genome", "--data.fasta", "g.fa"]) == \
        ["fit", "--config", genome, "--data.fasta", "g.fa"]
    assert recipes.expand_recipe_names(["fit", "--config=genome"]) == ["fit", f"--config={genome}"]
    nested = recipes.expand_recipe_names(["fit", "--config", "ecoli-variants/ecoli-v1-wd1"])[2]
    assert Path(nested).name == "ecoli-v1-wd1.yaml" and Path(nested).is_file()


def test_files_unknown_names_and_other_arguments_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "genome").write_text("trainer: {}\n")  # an existing file of that name wins
    argv = ["fit", "--config", "genome", "--config=no-such-recipe", "--config", "tiny.yaml",
            "--config", "../tiny", "--data.fasta", "tiny", "tiny"]
    assert recipes.expand_recipe_names(argv) == argv
    assert recipes.expand_recipe_names(["fit", "--config"]) == ["fit", "--config"]


def test_fit_reads_a_recipe_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "tiny", "--print_config"])
    assert exit_info.value.code == 0
    assert "expert_backend: grouped" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# biomoe recipes
# ---------------------------------------------------------------------------------------------
def test_recipes_lists_each_name_with_its_first_comment_line(capsys):
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for name in CONFIGS:
        assert name in lines, name
    assert "Test-sized: a few seconds on a CPU." in lines["tiny"]
    assert "relative to the working directory" in out


def test_recipes_copy_writes_the_recipe_and_never_overwrites(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["recipes", "copy", "genome"]) == 0
    assert (tmp_path / "genome.yaml").read_text() == (ROOT / "configs/genome.yaml").read_text()
    (tmp_path / "mine").mkdir()
    assert main(["recipes", "copy", "ecoli-variants/ecoli-v1-wd1", "mine"]) == 0
    assert (tmp_path / "mine/ecoli-v1-wd1.yaml").is_file()
    capsys.readouterr()
    (tmp_path / "tiny.yaml").write_text("mine\n")
    assert main(["recipes", "copy", "tiny", "tiny.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biomoe: error: recipes:") and "exists" in err and "\n" not in err
    assert (tmp_path / "tiny.yaml").read_text() == "mine\n"
    assert main(["recipes", "copy", "no-such"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no recipe named 'no-such'" in err and "\n" not in err


def test_recipes_copy_onto_an_existing_file_names_the_destination_as_it_was_given(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text("mine\n")
    for argv, hint in ((["tiny", "tiny.yaml"], "give another DEST"),
                       (["tiny", "--out", "tiny.yaml"], "give another --out"),
                       (["tiny"], "give a DEST")):
        assert main(["recipes", "copy", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert "exists; not overwritten" in err and hint in err, (argv, err)
    assert (tmp_path / "tiny.yaml").read_text() == "mine\n"


def test_recipes_help_shows_the_positional_destination(capsys):
    with pytest.raises(SystemExit):
        main(["recipes", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "[name] [DEST]" in usage, usage


def test_recipes_help_says_data_paths_stay_relative_to_the_working_directory(capsys):
    with pytest.raises(SystemExit):
        main(["recipes", "--help"])
    assert "relative to the working directory" in " ".join(capsys.readouterr().out.split())


def test_every_package_is_listed_for_the_wheel():
    # The recipes package is mapped onto configs/, so the package list is explicit: a new package
    # of biomoe/ must be added there or the wheel would not hold it.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set(find_packages(str(ROOT), include=["biomoe*"]))
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    # A listed package whose folder is gone (moved or deleted) stops the wheel from building.
    stale = listed - found - set(setuptools["package-dir"])
    assert not stale, f"remove from pyproject.toml [tool.setuptools] packages: {sorted(stale)}"
    assert setuptools["package-dir"] == {"biomoe.recipes": "configs"}


# ---------------------------------------------------------------------------------------------
# Every shipped config on a CPU
# ---------------------------------------------------------------------------------------------
SMALL = ["--data.fasta", str(LAMBDA), "--data.seq_length", "64", "--data.stride", "64", "--data.batch_size", "2",
         "--data.num_workers", "0", "--data.test_files", "null", "--data.val_files", "null",
         "--trainer.max_steps", "2", "--trainer.max_time", "null", "--trainer.val_check_interval", "2",
         "--trainer.limit_val_batches", "1", "--trainer.num_sanity_val_steps", "0",
         "--model.config.hidden_size", "32", "--model.config.num_layers", "2", "--model.config.num_heads", "4",
         "--model.config.num_kv_heads", "2", "--model.config.num_experts", "4", "--model.config.ffn_hidden_size", "32"]
"""The data, length and shape shrunk to seconds; trainer, callbacks and runtime stay as shipped."""

MULTI_PROCESS = {
    # Two processes of ExpertParallelStrategy on the CPU (gloo), as shipped.
    "smoke-2gpu": [],
    # EP=8 on 8 GPUs, shrunk to EP=2 on two CPU processes; mxfp8 needs a Blackwell GPU (on a CPU it
    # stops in one line naming model.runtime.precision, checked below), so bf16 here.
    "mixtral-8x7b-ep8": ["--trainer.devices", "2", "--trainer.strategy.init_args.expert_parallel_size", "2",
                         "--model.runtime.precision", "bf16"],
}
"""Configs whose strategy starts processes: run as a subprocess (Lightning's launcher re-runs the
command line, which inside pytest would be pytest's)."""


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_trains_two_steps_on_a_cpu(name, tmp_path, monkeypatch, capsys):
    # Run from an empty folder: relative outputs (runs/..., checkpoint dirpaths) land there.
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(ROOT / "configs" / f"{name}.yaml"), *SMALL,
            "--trainer.default_root_dir", str(tmp_path / "run")]
    if name in MULTI_PROCESS:
        result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *argv, *MULTI_PROCESS[name]], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        out = result.stdout
    else:
        assert main(argv) == 0, capsys.readouterr().err[-3000:]
        out = capsys.readouterr().out
    assert "validation bits/base" in out
    assert list(tmp_path.rglob("*.ckpt")) or list(tmp_path.rglob("*.distcp")), f"{name}: no checkpoint written"


@pytest.mark.slow
def test_a_gpu_only_precision_stops_in_one_line_on_a_cpu(tmp_path, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message on a machine without CUDA")
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(ROOT / "configs/mixtral-8x7b-ep8.yaml"), *SMALL, "--trainer.devices", "1",
            "--trainer.strategy.init_args.expert_parallel_size", "1", "--trainer.default_root_dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("biomoe: error:") and "model.runtime.precision" in err


# ---------------------------------------------------------------------------------------------
# The wheel
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_wheel_carries_the_recipes_and_they_run_outside_the_repository(tmp_path):
    import zipfile

    # Build from a copy of the sources: an in-tree build writes build/ and egg-info into the checkout.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("biomoe", "configs", "bench"):  # bench/ is beside the package, and must stay out of the wheel
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(wheels)],
                   check=True, timeout=300)
    wheel = next(wheels.glob("biomoe-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in CONFIGS:
        assert f"biomoe/recipes/{name}.yaml" in names, name
    assert not [n for n in names if n.startswith(("bench/", "biomoe/bench/"))], "the benchmark is in the wheel"
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": ""}
    run = [sys.executable, "-c", "import sys; from biomoe.cli.main import main; sys.exit(main(sys.argv[1:]))"]
    listed = subprocess.run([*run, "recipes"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "genome" in listed.stdout and "tiny" in listed.stdout
    where = subprocess.run([*run[:2], "import biomoe.cli.recipes as r; print(r.recipes_dir())"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()) == target / "biomoe/recipes", where.stderr[-2000:]
    fit = subprocess.run([*run, "fit", "--config", "tiny", "--data.fasta", str(LAMBDA), "--trainer.max_steps", "2",
                          "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "2"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert "validation bits/base" in fit.stdout
    assert list((elsewhere / "runs/tiny").rglob("last.ckpt"))


def test_the_corpus_recipe_tests_on_exactly_the_held_out_genomes_of_the_split_file():
    """configs/pretrain-corpus.yaml names its test genomes; data/corpus-splits.tsv decides them."""
    import csv

    import yaml

    with open(ROOT / "data" / "corpus-splits.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    held_out = {Path(r["file"]).name.split(".")[0] for r in rows if r["split"] != "train"}
    recipe = yaml.safe_load((ROOT / "configs" / "pretrain-corpus.yaml").read_text())
    assert held_out and set(recipe["data"]["test_files"]) == held_out
    assert recipe["data"]["fasta"] == ["data/large/corpus"]
