"""Headline figures quoted in the prose of README.md and docs/, each tied to the results file it
comes from: ``python -m bench.docs_tables --check`` (and the CPU test suite) fails when a quote is
gone from its document or disagrees with its file. One module per document holds its headlines."""

from __future__ import annotations

from pathlib import Path

from bench.docs_headlines import benchmarks, commands, corpus, gpus, mutations, quality, readme, recipes, scaling
from bench.docs_headlines.core import ROOT, Headline, HeadlineSourceError, read_source

__all__ = ["HEADLINES", "ROOT", "Headline", "HeadlineSourceError", "headline_problems", "read_source"]

HEADLINES: tuple[Headline, ...] = (
    *readme.HEADLINES, *benchmarks.HEADLINES, *quality.HEADLINES, *recipes.HEADLINES, *scaling.HEADLINES,
    *gpus.HEADLINES, *mutations.HEADLINES, *commands.HEADLINES, *corpus.HEADLINES,
)


def headline_problems(root: Path = ROOT) -> list[str]:
    """One line for every headline whose quote is missing from its document or disagrees with its file."""
    problems = []
    for h in HEADLINES:
        text = (root / h.document).read_text()
        if h.quote not in text:
            problems.append(f"{h.document}: no longer quotes {h.quote!r} (update HEADLINES)")
            continue
        value = h.value(*(read_source(source, root) for source in h.sources))
        if value not in h.quote:
            given = f"{h.source} gives" if not h.also else f"{' and '.join(h.sources)} give"
            problems.append(f"{h.document}: {h.quote!r} but {given} {value}")
    return problems
