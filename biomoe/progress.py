"""Progress lines on stderr for the long commands (score-fasta, score-variants, generate, embed).

A 2.8 Mb genome takes minutes to score on a CPU; without a progress line such a run is
indistinguishable from a hung one. ``fit``/``validate``/``predict`` use Lightning's progress bar.
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

__all__ = ["progress_bar"]


def progress_bar(total: int, desc: str, unit: str = "bp", disable: bool = False):
    """A tqdm bar on stderr (``unit_scale``: 2.8M bp, not 2812345 bp), redrawn at most twice a
    second so that log files collecting stderr stay small. Use as a context manager."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr, mininterval=0.5,
                dynamic_ncols=True, disable=disable)
