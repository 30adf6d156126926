"""Zero-shot mutation benchmark: do the model's log-likelihood ratios tell damaging coding
mutations from silent ones, better than a k-mer model does?

Genes are called with Prodigal (:mod:`biomoe.genomics.genes`); codons are sampled inside complete
genes (seeded; each gene equally likely, then each codon of it; the start and stop codons and
codons with a non-ACGT base are skipped) and every single-nucleotide variant at a sampled codon
(3 positions x 3 alternatives) is classed with the genetic code of ``table`` on the gene's own
strand: *synonymous*, *missense* or *stop-gain*. Each variant is scored twice:

* by the model, as :mod:`biomoe.inference.score_variants` scores any substitution (a window
  centred on it, ref and alt scored in shared batches): ``llr = log p(alt) - log p(ref)``;
* by an order-k Markov chain (default 6) fitted on the whole genome being scored, both strands.
  Fitting on the genome itself (the variant's own context included) is the cheap choice and
  *favours* the baseline: it has seen every reference k-mer it is asked about. A model that beats
  it still wins honestly. Only the k+1 bases from the variant on change their probabilities, so
  the Markov LLR is summed over those.

Damaging variants should look less likely, so the AUROC uses ``-llr`` as the score, with stop-gain
(or missense) as positives against synonymous negatives; 0.5 is chance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from biomoe.data.tokenizer import A_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.genomics.genes import Gene

__all__ = ["CLASSES", "PAIRS", "MutationSNV", "auroc", "classify_snv", "codon_table", "enumerate_snvs",
           "markov_llrs", "sample_codons", "summarise"]

CLASSES = ("synonymous", "missense", "stop_gain")
PAIRS = (("stop_gain", "synonymous"), ("missense", "synonymous"))
"""(positive class, negative class) of each AUROC."""

_COMPLEMENT = str.maketrans("ACGT", "TGCA")


def reverse_complement(seq: str) -> str:
    return seq.translate(_COMPLEMENT)[::-1]


@dataclass(frozen=True)
class CodonTable:
    """A genetic code: sense codon -> amino acid, and the stop codons."""

    id: int
    forward: Mapping[str, str]
    stops: frozenset[str]

    def translate(self, codon: str) -> str:
        """One-letter amino acid, ``*`` for a stop."""
        return "*" if codon in self.stops else self.forward[codon]


def codon_table(table: int) -> CodonTable:
    """NCBI translation table ``table`` (11: bacteria, archaea and plastids; 1: standard)."""
    from Bio.Data import CodonTable as tables
    try:
        code = tables.unambiguous_dna_by_id[int(table)]
    except KeyError:
        known = ", ".join(str(k) for k in sorted(tables.unambiguous_dna_by_id))
        raise GenomeInputError(None, f"--table {table}: not an NCBI translation table (known: {known})") from None
    return CodonTable(int(table), dict(code.forward_table), frozenset(code.stop_codons))


def classify_snv(codon: str, offset: int, alt: str, code: CodonTable) -> str:
    """Class of changing base ``offset`` (0..2) of sense ``codon`` (coding strand) to ``alt``."""
    mutated = codon[:offset] + alt + codon[offset + 1:]
    before, after = code.translate(codon), code.translate(mutated)
    if before == "*":
        raise ValueError(f"{codon} is a stop codon in table {code.id}; only sense codons are mutated")
    if after == "*":
        return "stop_gain"
    return "synonymous" if after == before else "missense"


@dataclass(frozen=True)
class MutationSNV:
    """One SNV at a sampled codon. ``position`` is 1-based on the forward strand and ``ref``/``alt``
    are forward-strand bases (as a VCF would write them); ``codon_position`` (1..3) counts on the
    gene's strand."""

    contig: str
    position: int
    ref: str
    alt: str
    gene: str
    strand: int
    codon_position: int
    codon: str  # reference codon on the coding strand
    klass: str

    @property
    def codon_middle(self) -> int:
        """1-based forward-strand position of the codon's middle base: where the nine SNVs of a
        codon centre their one shared scoring window."""
        return self.position - self.strand * (self.codon_position - 2)


def _codon_at(sequence: str, gene: Gene, index: int) -> tuple[str, list[int]]:
    """Codon ``index`` of ``gene`` on its coding strand and the 0-based forward coordinates of its
    three bases, in coding order."""
    if gene.strand > 0:
        coords = [gene.start + 3 * index + i for i in range(3)]
        return "".join(sequence[c] for c in coords).upper(), coords
    coords = [gene.end - 1 - 3 * index - i for i in range(3)]
    return "".join(sequence[c] for c in coords).upper().translate(_COMPLEMENT), coords


def _stop_mask(code: CodonTable, tokenizer: NucleotideTokenizer) -> np.ndarray:
    """[64] bool: which codon ids (16·first + 4·second + third base, each ``id - A_ID``) are stops."""
    mask = np.zeros(64, dtype=bool)
    for codon in code.stops:
        a, b, c = tokenizer.encode(codon) - A_ID
        mask[16 * a + 4 * b + c] = True
    return mask


def _eligible_codons(ids: np.ndarray, gene: Gene, stops: np.ndarray, tokenizer: NucleotideTokenizer) -> np.ndarray:
    """Codon indices of a complete gene that can be mutated: not the first (start) or last (stop)
    codon, only A/C/G/T, and a sense codon of the table. ``ids``: the contig's token ids, read on
    the gene's strand as :func:`_codon_at` reads one codon. Array operations over all the gene's
    codons: a Python loop building each codon's string took seconds a bacterial genome, held the GIL
    and so serialised the genomes prepared side by side."""
    count = gene.length // 3
    bases = ids[gene.start:gene.start + 3 * count] if gene.strand > 0 else \
        tokenizer.reverse_complement(ids[gene.end - 3 * count:gene.end])
    inner = bases.reshape(count, 3)[1:count - 1]
    unambiguous = NucleotideTokenizer.unambiguous_mask(inner).all(axis=1)
    digits = np.where(unambiguous[:, None], inner - A_ID, 0)
    return np.flatnonzero(unambiguous & ~stops[16 * digits[:, 0] + 4 * digits[:, 1] + digits[:, 2]]) + 1


def sample_codons(sequences: Mapping[str, str], genes: Sequence[Gene], count: int, seed: int,
                  code: CodonTable) -> list[tuple[Gene, int]]:
    """Up to ``count`` distinct (gene, codon index) pairs, seeded. Every complete gene has equal
    weight (each codon weighs 1/(its gene's eligible codons)), so long genes do not dominate."""
    tokenizer = NucleotideTokenizer()
    stops = _stop_mask(code, tokenizer)
    ids = {name: tokenizer.encode(sequence) for name, sequence in sequences.items()}
    owners: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for number, gene in enumerate(genes):
        if gene.partial or gene.length % 3:
            continue  # without its real start and stop the reading frame is not certain
        eligible = _eligible_codons(ids[gene.contig], gene, stops, tokenizer)
        if eligible.size:
            owners.append(np.full(eligible.size, number))
            indices.append(eligible)
            weights.append(np.full(eligible.size, 1.0 / eligible.size))
    if not indices:
        return []
    owner, index, weight = np.concatenate(owners), np.concatenate(indices), np.concatenate(weights)
    rng = np.random.default_rng(seed)
    p = weight / np.sum(weight)
    chosen = rng.choice(index.size, size=min(count, index.size), replace=False, p=p)
    pool = [(genes[int(owner[k])], int(index[k])) for k in chosen]
    # genome order: neighbouring variants then share windows and the output reads like a track
    return sorted(pool, key=lambda pair: (pair[0].contig, pair[0].start, pair[0].strand, pair[1]))


def enumerate_snvs(sequences: Mapping[str, str], codons: Sequence[tuple[Gene, int]],
                   code: CodonTable) -> list[MutationSNV]:
    """The nine SNVs of every sampled codon, classed on the gene's strand."""
    snvs = []
    for gene, index in codons:
        codon, coords = _codon_at(sequences[gene.contig], gene, index)
        for offset, coord in enumerate(coords):
            for alt in "ACGT":
                if alt == codon[offset]:
                    continue
                klass = classify_snv(codon, offset, alt, code)
                forward_ref = codon[offset] if gene.strand > 0 else codon[offset].translate(_COMPLEMENT)
                forward_alt = alt if gene.strand > 0 else alt.translate(_COMPLEMENT)
                snvs.append(MutationSNV(gene.contig, coord + 1, forward_ref, forward_alt, gene.label(),
                                        gene.strand, offset + 1, codon, klass))
    return snvs


def markov_llrs(model, sequences: Mapping[str, str], snvs: Sequence[MutationSNV]) -> np.ndarray:
    """log p(alt) - log p(ref) (nats) of each SNV under a fitted :class:`MarkovModel`: the sum over
    the variant's base and the ``order`` bases after it, each read from the ``order`` bases before
    it (backing off near contig ends and Ns exactly as the model does)."""
    import torch

    tokenizer = NucleotideTokenizer()
    k = model.order
    span = 2 * k + 1
    ref_rows = np.zeros((len(snvs), span), dtype=np.int64)
    alt_rows = np.zeros_like(ref_rows)
    keep = np.zeros((len(snvs), span), dtype=bool)
    for row, snv in enumerate(snvs):
        seq = sequences[snv.contig]
        begin = snv.position - 1 - k  # the slice is right-aligned on the variant's k contexts
        lo, hi = max(begin, 0), min(begin + span, len(seq))
        text = seq[lo:hi].upper()
        ids = tokenizer.encode(text)
        pad = lo - begin  # bases missing before a contig start: left-filled, never scored as context
        ref_rows[row, pad:pad + ids.size] = ids
        alt_rows[row] = ref_rows[row]
        alt_rows[row, k] = tokenizer.encode(snv.alt)[0]
        keep[row, k:pad + ids.size] = True
        if pad:  # what precedes a contig start is nothing: mark it non-ACGT so the context backs off
            ref_rows[row, :pad] = alt_rows[row, :pad] = tokenizer.encode("N")[0]
    out = []
    for rows in (ref_rows, alt_rows):
        labels = torch.from_numpy(rows)
        logp = torch.log_softmax(model.logits(labels, tokenizer.vocab_size), dim=-1)
        picked = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1).double().numpy()
        out.append(np.where(keep, picked, 0.0).sum(axis=1))
    return out[1] - out[0]


def auroc(llr: np.ndarray, classes: Sequence[str], positive: str, negative: str) -> float | None:
    """AUROC of ``-llr`` for ``positive`` against ``negative`` variants (others ignored); None when
    either class is empty."""
    import torch
    from biomoe.inference.roc import binary_auroc  # not torchmetrics: it imports transformers (seconds)

    classes = np.asarray(classes)
    pick = (classes == positive) | (classes == negative)
    target = classes[pick] == positive
    if not target.any() or target.all():
        return None
    preds = torch.from_numpy(-np.asarray(llr, dtype=np.float64)[pick])
    return float(binary_auroc(preds, torch.from_numpy(target).long()))


def summarise(classes: Sequence[str], scores: Mapping[str, np.ndarray]) -> dict[str, object]:
    """Counts per class and, for every scorer (``{"model": llr, "markov": llr}``), each pair's AUROC
    and mean LLR per class."""
    classes = np.asarray(classes)
    counts = {c: int((classes == c).sum()) for c in CLASSES}
    result: dict[str, object] = {"counts": counts}
    for name, llr in scores.items():
        llr = np.asarray(llr, dtype=np.float64)
        result[name] = {
            "auroc": {f"{p}_vs_{n}": auroc(llr, classes, p, n) for p, n in PAIRS},
            "mean_llr": {c: (float(llr[classes == c].mean()) if counts[c] else None) for c in CLASSES},
        }
    return result
