"""The shipped recipes: the YAML files of ``configs/``, installed with the package as ``biomoe/recipes/``.

``--config NAME`` names a recipe when NAME is not an existing file (``genome``,
``ecoli-variants/ecoli-v2-wd1-ema``); :func:`expand_recipe_names` rewrites it to the recipe's path
before the command line is parsed. ``biomoe recipes`` lists them and ``biomoe recipes copy NAME
[--out DEST]`` writes one out to edit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["recipes_dir", "available_recipes", "recipe_path", "expand_recipe_names", "main"]

_PACKAGE = Path(__file__).resolve().parents[1]

SUFFIX = ".yaml"

DATA_NOTE = ("Paths inside a recipe (data.fasta such as data/large/..., runs/...) are relative to the "
             "working directory, not to the recipe: run from a folder that holds them, or override them "
             "(--data.fasta my_genome.fa.gz).")


def recipes_dir() -> Path:
    """Where the recipes are: ``biomoe/recipes/`` in an installed wheel; the repository's
    ``configs/`` in a source checkout (an editable install reads that folder too)."""
    installed = _PACKAGE / "recipes"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


def available_recipes() -> dict[str, Path]:
    """Recipe name (its path under the recipes folder, without ``.yaml``) -> file, sorted by name."""
    root = recipes_dir()
    if not root.is_dir():
        return {}
    found = {path.relative_to(root).with_suffix("").as_posix(): path for path in root.rglob(f"*{SUFFIX}")}
    return dict(sorted(found.items()))


def recipe_path(name: str) -> Path | None:
    """The file of recipe ``name`` (``genome``, ``ecoli-variants/ecoli-v1-wd1``), or None."""
    if not name or name.endswith(SUFFIX) or name.startswith(("/", ".")) or ".." in name.split("/"):
        return None
    path = recipes_dir() / f"{name}{SUFFIX}"
    return path if path.is_file() else None


def expand_recipe_names(argv: list[str]) -> list[str]:
    """``--config NAME`` / ``--config=NAME`` -> the recipe's path, when NAME is no existing file but
    a recipe's name; every other argument is returned as it was (an unknown name is left for the
    config reader to report)."""
    out: list[str] = []
    expect_value = False
    for arg in argv:
        if expect_value:
            out.append(_expand(arg))
            expect_value = False
        elif arg == "--config":
            out.append(arg)
            expect_value = True
        elif arg.startswith("--config="):
            out.append("--config=" + _expand(arg[len("--config="):]))
        else:
            out.append(arg)
    return out


def _expand(value: str) -> str:
    if os.path.exists(value):
        return value
    path = recipe_path(value)
    return str(path) if path is not None else value


def first_comment(path: Path) -> str:
    """The recipe's first comment line (its one-line description), or an empty string."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            text = line.strip()
            if text.startswith("#"):
                return text.lstrip("#").strip()
            if text:
                return ""
    return ""


def main(argv: list[str]) -> int:
    # Imported here: main.py imports this module on every command, and arguments imports torch.
    from biomoe.cli.arguments import CommandParser

    parser = CommandParser(
        prog="biomoe recipes",
        description="List the shipped training recipes, or copy one out to edit. A recipe's name works "
                    "wherever a config file does: biomoe fit --config genome. " + DATA_NOTE)
    parser.add_argument("action", nargs="?", choices=("list", "copy"), default="list",
                        help="list (the default): every recipe and its first comment line; "
                             "copy NAME [DEST]: write recipe NAME to DEST (default ./<name>.yaml)")
    parser.add_argument("name", nargs="?", help="the recipe to copy (as listed)")
    parser.add_argument("dest", nargs="?", metavar="DEST",
                        help="file or existing folder to copy it to; never overwritten (or give it as --out)")
    parser.add_argument("--out", default=None, help="file or existing folder to copy it to; never overwritten")
    args = parser.parse_args(argv)
    if args.out is not None and args.dest is not None:
        parser.error(f"the destination is given twice: {args.dest} and --out {args.out}")
    # the refusal to overwrite names the spelling the user wrote
    other = "another --out" if args.out is not None else "another DEST" if args.dest is not None else \
        "a DEST (recipes copy NAME DEST)"
    args.dest = args.out if args.out is not None else args.dest
    recipes = available_recipes()
    if args.action == "list":
        if args.name is not None:
            parser.error(f"unexpected argument {args.name!r} (list takes none)")
        width = max((len(name) for name in recipes), default=0)
        for name, path in recipes.items():
            print(f"{name:<{width}}  {first_comment(path)}".rstrip())
        print(f"\n{DATA_NOTE}")
        return 0
    if args.name is None:
        parser.error("copy needs a recipe name (biomoe recipes lists them)")
    source = recipe_path(args.name.removesuffix(SUFFIX))
    if source is None:
        parser.error(f"no recipe named {args.name!r} (biomoe recipes lists them)")
    dest = Path(args.dest) if args.dest is not None else Path(source.name)
    if dest.is_dir():
        dest = dest / source.name
    try:
        with open(dest, "xb") as handle:  # exclusive: an existing file is never replaced
            handle.write(source.read_bytes())
    except FileExistsError:
        print(f"biomoe: error: recipes: {dest} exists; not overwritten (give {other})", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"biomoe: error: recipes: cannot write {dest}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"{args.name} -> {dest}")
    return 0
