"""Contigs named as users write them: the full FASTA ID, its accession, or a unique prefix.

NCBI FASTA headers carry IDs such as ``gi|208433976|ref|NC_011333.1|``, while users, region
strings and variant tables say ``NC_011333.1`` or ``NC_011333``. :class:`ContigNames` resolves a
name to the index of one contig in ``reader.contigs``, trying in order:

1. the exact ID (``ContigInfo.name``, or the record name inside its file when the name is
   namespaced by file as ``<label>#<record>``);
2. the accession: in ``|``-separated NCBI IDs the field after ``ref``, ``gb``, ``emb`` or
   ``dbj``; otherwise the ID itself when it looks like an accession (``NC_011333.1``);
3. the accession without its version (``NC_011333`` for ``NC_011333.1``);
4. a prefix of the ID (``gi|208433976``). A prefix that cuts a number short (``chr1`` of
   ``chr10``) is no match: it names a different contig as often as this one.

At each step, one match is the answer and several are an error naming up to three of them; a
name that matches nothing is an error too. The errors are :class:`ContigNameError` (a
``LookupError``) with a one-line message; callers add the file they read the name from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from biomoe.data.sources.reader import SequenceReader

__all__ = ["AmbiguousContigError", "ContigNameError", "ContigNames", "UnknownContigError", "accession_of"]

_DATABASE_TAGS = ("ref", "gb", "emb", "dbj")
_ACCESSION = re.compile(r"^[A-Za-z]+_?[A-Za-z]*\d+(?:\.\d+)?$")
_SHOWN = 3  # candidates named in an ambiguity error


class ContigNameError(LookupError):
    """A contig name that does not pick exactly one contig; ``str()`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnknownContigError(ContigNameError):
    pass


class AmbiguousContigError(ContigNameError):
    def __init__(self, message: str, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.candidates = list(candidates)


def accession_of(contig_id: str) -> str | None:
    """The accession in a FASTA ID: ``NC_011333.1`` for ``gi|208433976|ref|NC_011333.1|`` and for
    ``NC_011333.1`` itself; None when no field looks like one."""
    fields = contig_id.split("|")
    if len(fields) > 1:
        for tag, value in zip(fields, fields[1:]):
            if tag.lower() in _DATABASE_TAGS and value:
                return value
        return next((f for f in fields if _ACCESSION.match(f) and not f.isdigit()), None)
    return contig_id if _ACCESSION.match(contig_id) else None


def _unversioned(accession: str) -> str:
    head, dot, version = accession.rpartition(".")
    return head if dot and version.isdigit() and head else accession


class ContigNames:
    """Name -> index into ``reader.contigs`` (see the module text for what a name may be)."""

    def __init__(self, reader: SequenceReader | Iterable[str]) -> None:
        contigs = getattr(reader, "contigs", None)
        if contigs is not None:
            self.ids = [c.name for c in contigs]
            records = [c.record_name for c in contigs]
        else:
            self.ids = [str(name) for name in reader]
            records = list(self.ids)
        self._exact: dict[str, list[int]] = {}
        self._accession: dict[str, list[int]] = {}
        self._unversioned: dict[str, list[int]] = {}
        for i, (name, record) in enumerate(zip(self.ids, records)):
            for key in dict.fromkeys((name, record)):
                self._exact.setdefault(key, []).append(i)
            accession = accession_of(record)
            if accession is not None:
                self._accession.setdefault(accession, []).append(i)
                self._unversioned.setdefault(_unversioned(accession), []).append(i)
        self._records = records
        self._cache: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, name: object) -> bool:
        try:
            self.resolve(str(name))
        except ContigNameError:
            return False
        return True

    def resolve(self, name: str) -> int:
        """The index of the one contig ``name`` stands for; ContigNameError when none or several."""
        if name in self._cache:
            return self._cache[name]
        index = self._find(name)
        self._cache[name] = index
        return index

    def id_of(self, name: str) -> str:
        """The full contig ID ``name`` stands for."""
        return self.ids[self.resolve(name)]

    def _find(self, name: str) -> int:
        if not name:
            raise UnknownContigError("an empty contig name")
        exact = self._exact.get(name, [])
        if len(exact) > 1 and name in self.ids:  # a full ID beats another file's record of that name
            exact = [self.ids.index(name)]
        tiers = [exact, self._accession.get(name, []), self._unversioned.get(name, [])]
        tiers.append(self._prefixed(name))
        for hits in tiers:
            hits = list(dict.fromkeys(hits))
            if len(hits) == 1:
                return hits[0]
            if hits:
                shown = ", ".join(self.ids[i] for i in hits[:_SHOWN])
                more = f" and {len(hits) - _SHOWN} more" if len(hits) > _SHOWN else ""
                raise AmbiguousContigError(f"contig '{name}' is ambiguous: it matches {shown}{more}; "
                                           "name one by its full ID", [self.ids[i] for i in hits])
        raise UnknownContigError(f"contig '{name}' is not in the genome")

    def _prefixed(self, name: str) -> list[int]:
        hits = []
        for i, (contig_id, record) in enumerate(zip(self.ids, self._records)):
            for full in dict.fromkeys((contig_id, record)):
                if len(full) > len(name) and full.startswith(name) and not (
                        name[-1].isdigit() and full[len(name)].isdigit()):
                    hits.append(i)
                    break
        return hits
