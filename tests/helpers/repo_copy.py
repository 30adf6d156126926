"""Copies of the repository's documents and results files that a test may change, and an edit of one
JSON file in such a copy: the docs checks run on files whose values a test changes on purpose."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def copy_of(paths: Iterable[str], into: Path) -> Path:
    """Each repository path (a file or a folder) copied to the same place under ``into``."""
    for path in set(paths):
        src, dst = ROOT / path, into / path
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return into


def edit_json(root: Path, path: str, change: Callable[[Any], None]) -> None:
    """Apply ``change`` to the parsed JSON file ``root / path`` and write it back."""
    file = root / path
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))
