"""Where code or a config sends the reader to a section of a document (``docs/X.md, "Title"``), the
document exists and has that section: a heading or a bold lead-in that starts with the title. A
renamed or removed section would otherwise leave the code pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

CITATION = re.compile(r'(docs/[\w-]+\.md),\s*(?:#\s*)?"([^"]+)"')
"""``docs/benchmarks.md, "Title"``; the title may run over a line break of a comment or docstring."""


def citations(text: str) -> list[tuple[str, str]]:
    """``(document, title)`` of every citation in ``text``, the title's line breaks (and the comment
    marks after them) read as single spaces."""
    return [(m.group(1), " ".join(re.sub(r"\n\s*#?", " ", m.group(2)).split())) for m in CITATION.finditer(text)]


def sections(document: str) -> list[str]:
    """Every heading and every bold lead-in of a markdown document, lower case, spaces normalized,
    code marks dropped."""
    found = []
    for line in document.splitlines():
        if line.startswith("#"):
            found.append(line.lstrip("#"))
        found.extend(re.findall(r"\*\*([^*]+)\*\*", line))
    return [" ".join(s.replace("`", "").split()).lower() for s in found]


def cited_section_problems(root: Path) -> list[str]:
    files = [*root.glob("biomoe/**/*.py"), *root.glob("bench/**/*.py"), *root.glob("configs/*.yaml"), root / "cli.py"]
    problems = []
    for path in files:
        for document, title in citations(path.read_text()):
            target = root / document
            if not target.is_file():
                problems.append(f"{path.relative_to(root)}: {document} does not exist")
            elif not any(s.startswith(title.lower()) for s in sections(target.read_text())):
                problems.append(f'{path.relative_to(root)}: {document} has no section "{title}"')
    return problems


def test_every_section_the_code_cites_exists():
    assert cited_section_problems(ROOT) == []


def test_a_citation_of_a_missing_section_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Batch sizes\n\n**Kernels of scoring.** text\n")
    (tmp_path / "biomoe").mkdir()
    (tmp_path / "biomoe" / "a.py").write_text('"""See (docs/guide.md, "Batch\n    sizes") and docs/guide.md, '
                                              '"Kernels of scoring"."""\n# (docs/guide.md, "Inference batch\n# size")\n'
                                              '# docs/none.md, "Title"\n')
    (tmp_path / "cli.py").write_text("")
    assert cited_section_problems(tmp_path) == ['biomoe/a.py: docs/guide.md has no section "Inference batch size"',
                                                "biomoe/a.py: docs/none.md does not exist"]
