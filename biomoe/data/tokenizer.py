"""Single-nucleotide tokenizer for DNA.

One token per base keeps the model's positions aligned with genome coordinates (no
k-mer or BPE merges), which is what per-base analyses (loss along a contig, repeats,
reverse-complement consistency) need. Ids are fixed constants so checkpoints stay
compatible across versions; the embedding table is padded to a multiple of 64 because
GPU matmul kernels are faster on such shapes.

Encoding is a single numpy gather through a 256-entry byte lookup table; there is no
Python loop per base, so encoding a whole chromosome is cheap.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

__all__ = [
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "A_ID",
    "C_ID",
    "G_ID",
    "T_ID",
    "N_ID",
    "SPECIAL_TOKENS",
    "NUCLEOTIDES",
    "IUPAC_AMBIGUITY",
    "NucleotideTokenizer",
]

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
NUCLEOTIDES = "ACGTN"
IUPAC_AMBIGUITY = "RYSWKMBDHV"
A_ID, C_ID, G_ID, T_ID, N_ID = range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + 5)

_BASES = NUCLEOTIDES + IUPAC_AMBIGUITY
_COMPLEMENT = {
    "A": "T", "T": "A", "C": "G", "G": "C", "N": "N",
    "R": "Y", "Y": "R", "S": "S", "W": "W", "K": "M", "M": "K",
    "B": "V", "V": "B", "D": "H", "H": "D",
}
_UNK_CHAR = "?"

ArrayLike = TypeVar("ArrayLike", np.ndarray, torch.Tensor)


class NucleotideTokenizer:
    """Maps DNA strings to int64 token ids, one id per base.

    Ids: PAD=0, BOS=1, EOS=2, UNK=3, then A C G T N, then the IUPAC ambiguity codes
    R Y S W K M B D H V (ids 4..18). ``vocab_size`` is the real count (19);
    ``padded_vocab_size`` rounds it up to a multiple of 64 for the embedding table.

    ``fold_lowercase=True`` (default) maps soft-masked lowercase bases (repeats in
    most assemblies) to their uppercase ids, so repeats are ordinary training data;
    use :meth:`soft_mask` to keep the repeat annotation separately. With
    ``fold_lowercase=False`` lowercase letters become UNK: they are then excluded from
    the loss (see :meth:`unambiguous_mask`) which is how one trains on non-repeat
    sequence only. Any other unknown byte is also UNK (the FASTA reader rejects such
    files earlier, so UNK only appears here for strings built by hand).
    """

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(self, fold_lowercase: bool = True) -> None:
        self.fold_lowercase = fold_lowercase
        self.tokens: tuple[str, ...] = SPECIAL_TOKENS + tuple(_BASES)
        self.vocab_size: int = len(self.tokens)
        self.padded_vocab_size: int = -(-self.vocab_size // 64) * 64

        lut = np.full(256, UNK_ID, dtype=np.int64)
        for offset, base in enumerate(_BASES):
            lut[ord(base)] = A_ID + offset
            if fold_lowercase:
                lut[ord(base.lower())] = A_ID + offset
        self._encode_lut = lut

        chars = np.array(["", "", "", _UNK_CHAR, *_BASES], dtype="<U1")
        self._decode_lut = chars

        comp = np.arange(self.padded_vocab_size, dtype=np.int64)  # specials map to themselves
        for base, other in _COMPLEMENT.items():
            comp[self.token_to_id(base)] = self.token_to_id(other)
        self._complement_np = comp
        self._complement_torch = torch.from_numpy(comp.copy())

    # -- lookup helpers ---------------------------------------------------------------
    def token_to_id(self, token: str) -> int:
        """Id of one base letter or special token (``'A'`` -> 4, ``'<pad>'`` -> 0)."""
        return self.tokens.index(token.upper() if len(token) == 1 else token)

    def id_to_token(self, token_id: int) -> str:
        """Inverse of :meth:`token_to_id`."""
        return self.tokens[int(token_id)]

    # -- encode / decode --------------------------------------------------------------
    def encode(self, seq: str | bytes, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """Encode a DNA string into an int64 array (one id per base, vectorised)."""
        raw = seq if isinstance(seq, (bytes, bytearray, memoryview)) else seq.encode("ascii", "replace")
        ids = self._encode_lut[np.frombuffer(raw, dtype=np.uint8)]
        if add_bos or add_eos:
            parts = [np.array([BOS_ID], dtype=np.int64)] if add_bos else []
            parts.append(ids)
            if add_eos:
                parts.append(np.array([EOS_ID], dtype=np.int64))
            ids = np.concatenate(parts)
        return ids

    def decode(self, ids: np.ndarray | torch.Tensor | list[int]) -> str:
        """Decode ids to an uppercase string.

        PAD/BOS/EOS are dropped (they are not bases) and UNK renders as ``'?'`` so it
        cannot be mistaken for a real base. Ids beyond the vocabulary raise IndexError.
        """
        arr = _to_numpy(ids).astype(np.int64, copy=False).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise IndexError(f"token id out of range 0..{self.vocab_size - 1}")
        return "".join(self._decode_lut[arr].tolist())

    # -- sequence operations on ids ---------------------------------------------------
    def reverse_complement(self, ids: ArrayLike) -> ArrayLike:
        """Reverse complement of token ids along the last axis.

        Complements A<->T, C<->G, R<->Y, K<->M, B<->V, D<->H (N, S, W map to
        themselves); special tokens are kept as they are. Works on numpy arrays and
        torch tensors (any device) and returns the same type.
        """
        if isinstance(ids, torch.Tensor):
            lut = self._complement_torch.to(ids.device)
            return lut[ids.long()].flip(-1).to(ids.dtype)
        arr = np.asarray(ids)
        return self._complement_np[arr][..., ::-1].astype(arr.dtype, copy=False).copy()

    @staticmethod
    def unambiguous_mask(ids: ArrayLike) -> ArrayLike:
        """True where the id is A, C, G or T (the bases the loss is computed on).

        N, IUPAC ambiguity codes, UNK and special tokens are False: predicting an
        ambiguity code teaches the model about the assembly, not about the genome.
        """
        return (ids >= A_ID) & (ids <= T_ID)

    @staticmethod
    def soft_mask(seq: str | bytes) -> np.ndarray:
        """True where the base is lowercase (soft-masked repeat in most assemblies)."""
        raw = seq if isinstance(seq, (bytes, bytearray, memoryview)) else seq.encode("ascii", "replace")
        arr = np.frombuffer(raw, dtype=np.uint8)
        return (arr >= ord("a")) & (arr <= ord("z"))

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"NucleotideTokenizer(fold_lowercase={self.fold_lowercase}, "
            f"vocab_size={self.vocab_size}, padded_vocab_size={self.padded_vocab_size})"
        )


def _to_numpy(ids: np.ndarray | torch.Tensor | list[int]) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        return ids.detach().cpu().numpy()
    return np.asarray(ids)
