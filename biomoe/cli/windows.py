"""The window a command reads a genome in (``--window``, ``--seq-length``, ``--context``): its
default, and a word when the value asks the model for something it never learned.

Every command that reads windows (score-fasta, score-variants, embed, mutations, routing,
repeat-mix, markov, generate) takes its window from :func:`command_window`, so they share one
default (the training length, else :data:`DEFAULT_WINDOW`) and warn alike.

A model reads positions 0..seq_length-1 in training. Past that it meets positions it never saw
(its rotary embedding extrapolates), so scores of a longer window are not those of the model that
was validated; a window of a few bases gives every base almost no context, so scores say little
beyond base composition. Both still run (a user may want them), but never without a word; a
window of one base has no context at all and is refused.
"""

from __future__ import annotations

import os
import warnings

from biomoe.errors import GenomeInputError

__all__ = ["DEFAULT_WINDOW", "SHORT_WINDOW", "check_window", "command_window", "scoring_window"]

DEFAULT_WINDOW = 1024
"""The window of a checkpoint that records no training length."""
SHORT_WINDOW = 32
"""Below this many bases a window is said to give little context."""


def command_window(given: int | None, trained: int | None, option: str = "--window",
                   longest: int | None = None) -> int:
    """The window to use: ``given`` (the value of ``option``), else ``trained`` (the checkpoint's
    training length), else :data:`DEFAULT_WINDOW`. A given window is checked against ``trained``
    and ``longest``, the longest input sequence, where the command knows it."""
    if given is None:
        return trained or DEFAULT_WINDOW
    check_window(given, trained, option, longest)
    return given


def scoring_window(given: int | None, ckpt: str | os.PathLike[str] | None, option: str = "--window",
                   longest: int | None = None) -> int:
    """:func:`command_window` with the training length that checkpoint ``ckpt`` records (none
    without a checkpoint)."""
    from biomoe.checkpoint.records import training_seq_length  # reads the checkpoint: once a command runs

    return command_window(given, training_seq_length(ckpt) if ckpt is not None else None, option, longest)


def check_window(window: int, trained: int | None, option: str = "--window", longest: int | None = None) -> None:
    """Refuse a window without context; warn about one past the training length or very short.
    A window longer than every input (``longest`` bases) reads no position past the input's end,
    so it is past the training length only where the input is."""
    if window < 2:
        raise GenomeInputError(None, f"{option} {window}: every base would be read with no context (a window of "
                                     f"one base); give at least {SHORT_WINDOW}"
                                     + (f", or leave it out for the training length, {trained:,}" if trained else ""))
    if trained is not None and min(window, longest or window) > trained:
        warnings.warn(f"{option} {window:,} is longer than the {trained:,} bases the model was trained on: "
                      f"positions past {trained:,} are ones it never saw, so scores there are not those of the "
                      f"validated model (leave {option} out to use the training length)", stacklevel=2)
    elif window < SHORT_WINDOW:
        warnings.warn(f"{option} {window:,}: each base sees at most {window - 1:,} bases before it, so scores say "
                      f"little beyond base composition (the model was trained on "
                      f"{f'{trained:,}' if trained else 'longer'} windows)", stacklevel=2)
