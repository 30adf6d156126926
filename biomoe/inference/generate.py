"""``biomoe generate``: sample DNA from a trained model.

Sampling reads the model's next-base distribution one base at a time. A :class:`KVCache` keeps
the keys and values of everything already read, so each new base costs one token's forward pass
and a sample of ``L`` bases costs time linear in ``L`` (without it, quadratic).

Only A, C, G and T are emitted (N too with ``allow_n``): the model's vocabulary also holds
special tokens and IUPAC ambiguity codes, which are never valid output. ``temperature`` scales the
logits (0 = always the most likely base), ``top_k`` keeps the k most likely bases and ``top_p``
the smallest set whose probability reaches p (nucleus sampling), applied in that order.

The model was trained on windows of ``context`` tokens that start with ``<bos>``. When a sample
outgrows that context, generation continues from a fresh cache that holds ``<bos>`` and the last
half-context bases, exactly as a training window would start, instead of feeding the model
positions it has never seen. The cost stays linear (one refill per half context).

Every sample draws its randomness from its own stream seeded by ``(seed, sample number)``, so a
sample does not change when ``--batch-size`` or ``--num-samples`` does.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from biomoe.cli.arguments import CommandParser
from biomoe.data.tokenizer import A_ID, BOS_ID, C_ID, G_ID, N_ID, T_ID, NucleotideTokenizer
from biomoe.errors import GenomeInputError
from biomoe.model.transformer import KVCache, MoETransformer

__all__ = ["SamplingSettings", "emitted_token_ids", "generate", "main", "parse_region", "sample_next"]

_NOISE_BLOCK = 1024  # uniforms drawn per sample at a time (one host->device copy per block)


@dataclass(frozen=True)
class SamplingSettings:
    """How the next base is drawn from the model's distribution."""

    temperature: float = 1.0
    """Divides the logits: < 1 sharpens, > 1 flattens; 0 = greedy (always the most likely base)."""
    top_k: int | None = None
    """Keep only the k most likely bases (None = all)."""
    top_p: float | None = None
    """Keep the smallest set of bases whose probability reaches p (None = all)."""
    allow_n: bool = False
    """Let the model emit N (unknown base) besides A/C/G/T."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def emitted_token_ids(allow_n: bool = False) -> list[int]:
    """The token ids generation may produce: A, C, G, T (and N)."""
    return [A_ID, C_ID, G_ID, T_ID] + ([N_ID] if allow_n else [])


def sample_next(logits: Tensor, settings: SamplingSettings, uniforms: Tensor) -> Tensor:
    """Token ids [b] drawn from ``logits`` [b, vocab] under ``settings``.

    Sampling is by inverse CDF on ``uniforms`` [b] (in [0, 1)) rather than ``torch.multinomial``,
    so the random numbers come from per-sample streams the caller controls.
    """
    first, last = A_ID, (N_ID if settings.allow_n else T_ID)  # the emitted ids are one contiguous range
    scores = logits[:, first:last + 1].double()
    if settings.temperature == 0:
        return first + scores.argmax(-1)
    scores = scores / settings.temperature
    if settings.top_k is not None and settings.top_k < scores.shape[-1]:
        kth = scores.topk(settings.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = scores.softmax(-1)
    if settings.top_p is not None and settings.top_p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # the most likely base is always kept
        drop = torch.zeros_like(order, dtype=torch.bool).scatter(-1, order, mass_before >= settings.top_p)
        probs = probs.masked_fill(drop, 0.0)
    cdf = probs.cumsum(-1)
    threshold = uniforms.to(device=cdf.device, dtype=cdf.dtype)[:, None] * cdf[:, -1:]
    # Token j is chosen when cdf[j-1] <= threshold < cdf[j]: never a token of probability zero.
    choice = (cdf <= threshold).sum(-1).clamp_(max=probs.shape[-1] - 1)
    return first + choice


class _SampleNoise:
    """Uniform random numbers, one independent stream per sample (numpy's SeedSequence)."""

    def __init__(self, seed: int, sample_ids: range, device: torch.device) -> None:
        self._rngs = [np.random.default_rng([seed, i]) for i in sample_ids]
        self._device = device
        self._block: Tensor | None = None
        self._used = _NOISE_BLOCK

    def next(self) -> Tensor:
        if self._used == _NOISE_BLOCK:
            block = np.stack([rng.random(_NOISE_BLOCK) for rng in self._rngs], axis=1)
            self._block = torch.from_numpy(block).to(self._device)
            self._used = 0
        assert self._block is not None
        self._used += 1
        return self._block[self._used - 1]


@torch.no_grad()
def generate(model: MoETransformer, prompt: np.ndarray | None, length: int, num_samples: int = 1,
             settings: SamplingSettings = SamplingSettings(), seed: int = 0, batch_size: int = 16,
             context: int | None = None, progress=None) -> list[np.ndarray]:
    """``num_samples`` continuations of ``prompt`` (token ids; None or empty = from ``<bos>`` alone),
    ``length`` bases each, as token-id arrays.

    ``context`` caps the tokens the model attends to (``<bos>`` included); None = no cap.
    ``progress`` (a tqdm-like object) is advanced by one per generated base.
    """
    if length < 1 or num_samples < 1 or batch_size < 1:
        raise ValueError("length, num_samples and batch_size must be >= 1")
    if context is not None and context < 2:
        raise ValueError(f"context must be >= 2 tokens (<bos> and a base), got {context}")
    prompt_ids = np.zeros(0, dtype=np.int64) if prompt is None else np.asarray(prompt, dtype=np.int64)
    samples: list[np.ndarray] = []
    for first in range(0, num_samples, batch_size):
        rows = range(first, min(first + batch_size, num_samples))
        samples.extend(_generate_batch(model, prompt_ids, length, rows, settings, seed, context, progress))
    return samples


def _generate_batch(model: MoETransformer, prompt: np.ndarray, length: int, rows: range,
                    settings: SamplingSettings, seed: int, context: int | None, progress) -> list[np.ndarray]:
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    b = len(rows)
    max_tokens = 1 + len(prompt) + length  # <bos>, prompt, generated bases: all a sample can feed
    max_tokens = max_tokens if context is None else min(context, max_tokens)
    keep = max(1, (max_tokens - 1) // 2)  # bases carried into a refilled cache
    history = torch.from_numpy(prompt).to(device).expand(b, -1)  # prompt + generated so far
    generated = torch.empty(b, length, dtype=torch.long, device=device)
    cache = KVCache(model.config, b, max_tokens, device=device, dtype=dtype)
    noise = _SampleNoise(seed, rows, device)

    def refill(tail: Tensor) -> Tensor:
        """Start a fresh cache from <bos> + ``tail`` and return the next-token logits."""
        cache.length = 0
        tokens = torch.cat([torch.full((b, 1), BOS_ID, device=device, dtype=torch.long), tail], dim=1)
        return model(tokens, cache=cache).logits[:, -1]

    logits = refill(history[:, len(prompt) - min(len(prompt), max_tokens - 1):])
    for t in range(length):
        token = sample_next(logits.float(), settings, noise.next())
        generated[:, t] = token
        if progress is not None:
            progress.update(b)
        if t == length - 1:
            break
        if cache.length < max_tokens:
            logits = model(token[:, None], cache=cache).logits[:, -1]
        else:
            so_far = torch.cat([history, generated[:, :t + 1]], dim=1)
            logits = refill(so_far[:, -keep:])
    return list(generated.cpu().numpy())


# ----------------------------------------------------------------------------------- command line
_REGION = re.compile(r"^(?P<contig>.+?)(?::(?P<start>[\d,]+)-(?P<end>[\d,]+))?$")


def parse_region(text: str) -> tuple[str, int | None, int | None]:
    """``contig:start-end`` (1-based, inclusive, as samtools writes regions; commas allowed) ->
    (contig, 0-based start, end); a bare ``contig`` means all of it (None, None)."""
    match = _REGION.match(text.strip())
    if match is None or not match.group("contig"):
        raise ValueError(f"region {text!r} is not contig:start-end")
    if match.group("start") is None:
        return match.group("contig"), None, None
    start, end = (int(match.group(key).replace(",", "")) for key in ("start", "end"))
    if start < 1 or end < start:
        raise ValueError(f"region {text!r}: start must be >= 1 and end >= start (1-based, inclusive)")
    return match.group("contig"), start - 1, end


def _prompt_from_args(args: argparse.Namespace) -> tuple[np.ndarray | None, str, list[Path]]:
    """(prompt ids, description for the FASTA header, input files)."""
    tokenizer = NucleotideTokenizer()
    if args.prompt is not None:
        text = "".join(args.prompt.split())
        bad = sorted(set(text.upper()) - set("ACGTNRYSWKMBDHV"))
        if bad:
            raise GenomeInputError(None, f"--prompt: character(s) {''.join(bad)!r} are not IUPAC nucleotide codes")
        return tokenizer.encode(text), f"prompt={len(text)}bp", []
    if args.prompt_region is not None:
        if args.fasta is None:
            raise GenomeInputError(None, "--prompt-region needs --fasta (the genome the region is in)")
        from biomoe.data.fasta import Genome

        genome = Genome(args.fasta)
        source = " ".join(args.fasta)
        try:
            contig, start, end = parse_region(args.prompt_region)
        except ValueError as exc:
            raise GenomeInputError(None, f"--prompt-region: {exc}") from None
        if contig not in genome:
            raise GenomeInputError(source, f"--prompt-region: contig '{contig}' is not in the genome")
        length = genome.contig(contig).length
        start, end = (0, length) if start is None else (start, end)
        if end > length:
            raise GenomeInputError(source, f"--prompt-region {args.prompt_region}: beyond the end of "
                                               f"{contig} ({length:,} bp)")
        return tokenizer.encode(genome.fetch(contig, start, end)), f"prompt={contig}:{start + 1}-{end}", \
            list(genome.paths)
    return None, "prompt=none", []


def _fasta_text(name: str, description: str, sequence: str, width: int) -> str:
    lines = [f">{name} {description}"]
    lines.extend(sequence[i:i + width] for i in range(0, len(sequence), width))
    return "\n".join(lines) + "\n"


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from biomoe.genomics.score_fasta import positive_int

    parser = CommandParser(prog="biomoe generate", description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", help="checkpoint, or a run folder (its best checkpoint)")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=None, help="bases to continue (default: start from <bos> alone)")
    prompt.add_argument("--prompt-region", default=None, metavar="CONTIG:START-END",
                        help="continue this region of --fasta (1-based, inclusive; a bare contig name = all of it)")
    parser.add_argument("--fasta", nargs="+", default=None, help="genome FASTA for --prompt-region")
    parser.add_argument("--out", required=True, type=Path, help="output FASTA (written atomically)")
    parser.add_argument("--length", type=positive_int, default=1000, help="bases to generate per sample (default %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=1, help="default %(default)s")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="samples generated together (default %(default)s)")
    parser.add_argument("--temperature", type=_temperature, default=1.0, help="0 = greedy (default %(default)s)")
    parser.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely bases")
    parser.add_argument("--top-p", type=_probability, default=None, help="nucleus sampling mass")
    parser.add_argument("--seed", type=int, default=0, help="default %(default)s; each sample has its own stream")
    parser.add_argument("--allow-n", action="store_true", help="let the model emit N besides A/C/G/T")
    parser.add_argument("--context", type=positive_int, default=None,
                        help="tokens the model attends to (default: the checkpoint's training seq_length)")
    parser.add_argument("--include-prompt", action="store_true", help="write prompt + generated bases")
    parser.add_argument("--name", default="sample", help="FASTA record names: NAME_1, NAME_2, ... (default %(default)s)")
    parser.add_argument("--line-width", type=positive_int, default=80, help="FASTA line width (default %(default)s)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="default %(default)s")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv: list[str]) -> int:
    from biomoe.files import atomic_write, check_outputs
    from biomoe.checkpoint.run_folder import resolve_checkpoint
    from biomoe.inference.scoring import load_model
    from biomoe.checkpoint.records import training_seq_length
    from biomoe.progress import progress_bar

    args = build_parser().parse_args(argv)
    args.ckpt = resolve_checkpoint(args.ckpt)  # a run folder -> its best checkpoint
    prompt, prompt_text, inputs = _prompt_from_args(args)
    check_outputs([args.out], [args.ckpt, *inputs])
    settings = SamplingSettings(args.temperature, args.top_k, args.top_p, args.allow_n)
    model = load_model(args.ckpt).to(args.device)
    context = args.context or training_seq_length(args.ckpt)
    if context is not None and context < 2:
        raise GenomeInputError(None, f"--context {context}: needs at least 2 tokens (<bos> and a base)")
    if prompt is not None and context is not None and len(prompt) > context - 1:
        print(f"biomoe: note: the prompt has {len(prompt):,} bases; the model reads its last {context - 1:,} "
              f"(context {context:,} tokens)", file=sys.stderr)
    with progress_bar(args.num_samples * args.length, "generate", disable=args.no_progress) as bar:
        samples = generate(model, prompt, args.length, args.num_samples, settings, args.seed, args.batch_size,
                           context, progress=bar)
    tokenizer = NucleotideTokenizer()
    prefix = tokenizer.decode(prompt) if args.include_prompt and prompt is not None else ""
    description = (f"{prompt_text} length={args.length} seed={args.seed} temperature={args.temperature:g}"
                   + (f" top_k={args.top_k}" if args.top_k else "") + (f" top_p={args.top_p:g}" if args.top_p else "")
                   + (" with_prompt" if prefix else ""))
    text = "".join(_fasta_text(f"{args.name}_{i + 1}", description, prefix + tokenizer.decode(ids), args.line_width)
                   for i, ids in enumerate(samples))
    with atomic_write(args.out, "w") as handle:
        handle.write(text)
    print(f"wrote {args.out} ({len(samples)} sample(s) of {args.length:,} bases)")
    return 0
