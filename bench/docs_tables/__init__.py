"""``python -m bench.docs_tables``: the measurement tables of README.md and docs/ rendered from results/.

A table in a document sits between ``<!-- table:NAME -->`` and ``<!-- /table -->``; its text is what
:data:`TABLES` renders from the results files it names, with the machine, date and software read
from them. ``--check`` changes nothing and exits 1 naming every table that differs from its files
and every headline figure in prose that disagrees with its file (:mod:`bench.docs_headlines`; the
CPU test suite runs the same checks); without it the tables are rewritten in place.

    python -m bench.docs_tables            # re-render every marked table (make docs-tables)
    python -m bench.docs_tables --check    # exit 1 if a document's table is not what its files say
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bench.docs_headlines import HeadlineSourceError, headline_problems
from bench.docs_tables import experts, goals, inference, optimizer, quality, recipes, scaling, training
from bench.docs_tables.report import ROOT, DocsTableError, Report, Table, read_report

__all__ = ["ROOT", "TABLES", "DocsTableError", "Report", "Table", "documents", "main", "marked_tables", "read_report",
           "render", "rendered_text", "stale_tables"]

DOCUMENTS = ("README.md", "docs/*.md", "results/**/README.md")
OPENING = re.compile(r"<!-- table:[a-z0-9-]+ -->")
MARKER = re.compile(r"(<!-- table:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)

TABLES: dict[str, Table] = {**training.TABLES, **optimizer.TABLES, **goals.TABLES, **experts.TABLES, **quality.TABLES,
                             **recipes.TABLES, **inference.TABLES, **scaling.TABLES}
"""Every table a document may mark, by name, from each family's module."""


def render(name: str, root: Path = ROOT) -> str:
    if name not in TABLES:
        raise DocsTableError(f"table:{name}: no such table (known: {', '.join(TABLES)})")
    spec = TABLES[name]
    return spec.render([read_report(path, root) for path in spec.sources])


def documents(root: Path = ROOT) -> list[Path]:
    return sorted(p for pattern in DOCUMENTS for p in root.glob(pattern))


def rendered_text(text: str, where: str, root: Path = ROOT) -> str:
    """``text`` with the body of every marked table replaced by its rendering."""
    def replace(match: re.Match[str]) -> str:
        try:
            body = render(match["name"], root)
        except DocsTableError as err:
            raise DocsTableError(f"{where}: {err}") from None
        return match.group(1) + body + match.group(4)

    if len(OPENING.findall(text)) != len(MARKER.findall(text)):
        raise DocsTableError(f"{where}: a '<!-- table:NAME -->' marker without its '<!-- /table -->'")
    return MARKER.sub(replace, text)


def stale_tables(root: Path = ROOT) -> list[str]:
    """``document: table:NAME`` for every marked table whose text is not what its files render."""
    stale = []
    for doc in documents(root):
        text = doc.read_text()
        where = str(doc.relative_to(root))
        new = rendered_text(text, where, root)
        if new != text:
            old_bodies = {m["name"]: m["body"] for m in MARKER.finditer(text)}
            new_bodies = {m["name"]: m["body"] for m in MARKER.finditer(new)}
            stale += [f"{where}: table:{n}" for n in old_bodies if old_bodies[n] != new_bodies[n]]
    return stale


def marked_tables(root: Path = ROOT) -> dict[str, list[str]]:
    """Each table name to the documents that show it."""
    found: dict[str, list[str]] = {}
    for doc in documents(root):
        for m in MARKER.finditer(doc.read_text()):
            found.setdefault(m["name"], []).append(str(doc.relative_to(root)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docs_tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = [f"stale: {line} (run `make docs-tables`)" for line in stale_tables(ROOT)]
            stale += headline_problems(ROOT)
            for line in stale:
                print(line, file=sys.stderr)
            return 1 if stale else 0
        from biomoe.files import write_text

        for doc in documents(ROOT):
            text = doc.read_text()
            where = str(doc.relative_to(ROOT))
            new = rendered_text(text, where, ROOT)
            if new != text:
                write_text(doc, new)
                print(f"rendered {where}")
    except (DocsTableError, HeadlineSourceError) as err:
        print(f"docs-tables: error: {err}", file=sys.stderr)
        return 2
    return 0

