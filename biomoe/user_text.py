"""Decoding the plain-text inputs users write (configs, variant tables) into one-line errors.

A file saved by a spreadsheet or an editor may carry a byte-order mark, be gzip-compressed or be
in another encoding; the user needs the offending byte's offset, not a ``UnicodeDecodeError``.
"""

from __future__ import annotations

import os

from biomoe.errors import GenomeInputError

__all__ = ["decode_user_text"]


def decode_user_text(raw: bytes, path: str | os.PathLike[str], kind: str, gzip_advice: str = "") -> str:
    """The text of a plain-text input the user wrote (a config, a variant table), or one line why not.

    ``kind`` names what the file should be ("a YAML config"). A UTF-8 byte-order mark, which
    spreadsheet "UTF-8" exports write, is dropped; gzip, other encodings and binary content are
    refused with the offending byte's offset, so the user can find it."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if raw[:2] == b"\x1f\x8b":
        raise GenomeInputError(path, f"is gzip-compressed, not {kind}{gzip_advice}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GenomeInputError(path, f"not {kind} (not UTF-8 text: byte 0x{raw[exc.start]:02x} at "
                                     f"offset {exc.start:,})") from None
    if "\x00" in text:
        raise GenomeInputError(path, f"not {kind} (binary content)")
    return text
