"""The Hugging Face side of the inference rows: ``MixtralForCausalLM`` loaded from the export of the
same checkpoint, doing each command's work with plain transformers calls.

The model is loaded with ``from_pretrained`` in bf16 (fp32 on a CPU, as biomoe runs there), sdpa
attention and ``grouped_mm`` experts on a GPU (HF's fastest experts kernel; its eager loop on a
CPU, where ``grouped_mm`` has no kernel), and runs under ``torch.inference_mode``. Inputs are
biomoe's token ids (the export's tokenizer maps the same), read from the genome with the same
window generator the commands use, so both sides score exactly the same windows. Batches hold up
to ``batch_tokens`` tokens of equal-length windows (the short last window of a contig runs on its
own): padding-free, the strongest plain forward.

Every function returns :class:`HFRun`: its wall time including the load (``seconds``), the time
of the work alone, after the model is on the device (``compute_seconds``), and, apart, the time and
work of its first batch (the warm-up a GPU pays once), so that the rate after it compares with
biomoe's steady rate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer

__all__ = ["HFGenerator", "HFRun", "hf_embed", "hf_generate", "hf_score_fasta", "hf_score_variants", "load_hf"]


@dataclass
class HFRun:
    seconds: float
    compute_seconds: float
    work: int
    details: dict
    first_seconds: float | None = None
    """Time from the model on the device to the first batch's results (None: not timed apart)."""
    first_work: int | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_hf(folder: Path, device: torch.device):
    """The exported folder as HF would load it for inference; returns (model, settings)."""
    from transformers import MixtralForCausalLM  # optional dependency
    from transformers.utils import logging as hf_logging  # optional dependency

    hf_logging.disable_progress_bar()  # the loading bar, once per run, would fill the bench's log
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    experts = "grouped_mm" if cuda else "eager"
    model = MixtralForCausalLM.from_pretrained(str(folder), dtype=dtype, attn_implementation="sdpa",
                                               experts_implementation=experts)
    model.to(device).eval().requires_grad_(False)
    return model, {"dtype": str(dtype).replace("torch.", ""), "attention": "sdpa", "experts": experts}


def _genome_batches(fasta: Path, window: int, batch_tokens: int) -> Iterator[tuple[list, np.ndarray]]:
    """Batches of equal-length windows, as (keys, ids [rows, length]), in genome order."""
    from biomoe.data.sources.registry import open_reader
    from biomoe.inference.score_fasta import genome_windows

    rows = max(1, batch_tokens // window)
    pending: dict[int, tuple[list, list]] = {}
    for item in genome_windows(open_reader(fasta), window):
        keys, arrays = pending.setdefault(item.ids.size, ([], []))
        keys.append(item.key)
        arrays.append(item.ids)
        if len(arrays) == rows:
            yield keys, np.stack(arrays)
            del pending[item.ids.size]
    for keys, arrays in pending.values():
        yield keys, np.stack(arrays)


def _log_likelihood(model, labels: torch.Tensor) -> torch.Tensor:
    """Per-base log p (fp32, nats; NaN at non-ACGT) of ``labels`` [rows, length]: inputs
    ``[BOS] + labels[:-1]``, log_softmax of the logits, gathered at each base."""
    inputs = torch.cat([torch.full_like(labels[:, :1], BOS_ID), labels[:, :-1]], dim=1)
    logits = model(input_ids=inputs, use_cache=False).logits
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None])[..., 0]
    return torch.where(NucleotideTokenizer.unambiguous_mask(labels), logp, torch.full_like(logp, float("nan")))


def hf_score_fasta(folder: Path, fasta: Path, device: torch.device, window: int, batch_tokens: int) -> HFRun:
    """Per-base fp32 scores of every window of the genome, copied to the host."""
    started = time.perf_counter()
    model, settings = load_hf(folder, device)
    _sync(device)
    loaded = time.perf_counter()
    bases = 0
    total = 0.0
    first: tuple[float, int] | None = None
    with torch.inference_mode():
        for _, ids in _genome_batches(fasta, window, batch_tokens):
            labels = torch.from_numpy(ids).to(device, non_blocking=True)
            scores = _log_likelihood(model, labels).cpu().numpy()  # on the host: the batch is done
            bases += scores.size
            total += float(np.nansum(scores, dtype=np.float64))
            first = first or (time.perf_counter() - loaded, bases)
    _sync(device)
    ended = time.perf_counter()
    return HFRun(ended - started, ended - loaded, bases,
                 {**settings, "batch_tokens": batch_tokens, "log_likelihood": total}, *(first or (None, None)))


def hf_embed(folder: Path, fasta: Path, device: torch.device, window: int, batch_tokens: int,
             pool_size: int) -> HFRun:
    """Last hidden state (``model.model``, after the final norm) of ``[BOS] + window``, the state
    of each base taken where it is the input token, mean-pooled over the A/C/G/T bases of each
    ``pool_size``-base bin of each contig on the device; the pooled rows copied to the host."""
    from biomoe.data.sources.registry import open_reader

    started = time.perf_counter()
    model, settings = load_hf(folder, device)
    hidden = model.config.hidden_size
    contigs = open_reader(fasta).contigs
    first_row = {c.name: 0 for c in contigs}
    total = 0
    for c in contigs:
        first_row[c.name] = total
        total += -(-c.length // pool_size)
    _sync(device)
    loaded = time.perf_counter()
    bases = 0
    first: tuple[float, int] | None = None
    with torch.inference_mode():
        sums = torch.zeros(total, hidden, dtype=torch.float32, device=device)
        counts = torch.zeros(total, dtype=torch.float32, device=device)
        for keys, ids in _genome_batches(fasta, window, batch_tokens):
            rows, length = ids.shape
            tokens = torch.from_numpy(ids).to(device, non_blocking=True)
            inputs = torch.cat([torch.full_like(tokens[:, :1], BOS_ID), tokens], dim=1)
            states = model.model(input_ids=inputs, use_cache=False).last_hidden_state[:, 1:]
            bins = np.stack([first_row[name] + (start + np.arange(length)) // pool_size for name, start in keys])
            index = torch.from_numpy(bins.reshape(-1)).to(device, non_blocking=True)
            weight = NucleotideTokenizer.unambiguous_mask(tokens).reshape(-1)
            values = torch.where(weight[:, None], states.reshape(rows * length, hidden).float(), 0.0)
            sums.index_add_(0, index, values)
            counts.index_add_(0, index, weight.float())
            bases += rows * length
            if first is None:  # the one wait added: the first batch timed apart
                _sync(device)
                first = (time.perf_counter() - loaded, bases)
        pooled = (sums / counts[:, None]).cpu().numpy()  # NaN rows where a bin has no A/C/G/T
    _sync(device)
    ended = time.perf_counter()
    return HFRun(ended - started, ended - loaded, bases,
                 {**settings, "batch_tokens": batch_tokens, "rows": int(pooled.shape[0])}, *(first or (None, None)))


def hf_score_variants(folder: Path, fasta: Path, variants_tsv: Path, device: torch.device, window: int,
                      batch_tokens: int) -> HFRun:
    """Summed log-likelihood of the ref and the alt window of every variant (the windows
    ``score-variants`` scores), copied to the host as one fp32 pair per variant."""
    from biomoe.data.sources.registry import open_reader
    from biomoe.inference.score_variants import prepare_windows, read_variants

    started = time.perf_counter()
    model, settings = load_hf(folder, device)
    _sync(device)
    loaded = time.perf_counter()
    tokenizer = NucleotideTokenizer()
    variants = read_variants(variants_tsv)
    prepared = prepare_windows(open_reader(fasta), variants, window, source=str(variants_tsv))
    per_batch = max(1, batch_tokens // (2 * window))
    llr = []
    first: tuple[float, int] | None = None
    with torch.inference_mode():
        for i in range(0, len(prepared), per_batch):
            chunk = prepared[i:i + per_batch]
            by_length: dict[int, list[np.ndarray]] = {}
            for _, ref, alt in chunk:
                by_length.setdefault(len(ref), []).extend([tokenizer.encode(ref), tokenizer.encode(alt)])
            for arrays in by_length.values():
                labels = torch.from_numpy(np.stack(arrays)).to(device, non_blocking=True)
                sums = _log_likelihood(model, labels).nansum(-1).view(-1, 2).cpu().numpy()
                llr.extend((sums[:, 1] - sums[:, 0]).tolist())
            first = first or (time.perf_counter() - loaded, len(llr))  # on the host: the batch is done
    _sync(device)
    ended = time.perf_counter()
    return HFRun(ended - started, ended - loaded, len(llr),
                 {**settings, "variants_per_batch": per_batch, "window": window, "mean_llr": float(np.mean(llr))},
                 *(first or (None, None)))


class HFGenerator:
    """One ``MixtralForCausalLM`` kept for every generation run of a network: with a static cache on
    a GPU, ``generate`` compiles the decoding forward (transformers' auto-compile), and a compiled
    model is what a user who generates repeatedly runs. The warm-up call pays the compilation;
    ``load_seconds`` (``from_pretrained`` to the device, measured once) is added to each run's wall time."""

    def __init__(self, folder: Path, device: torch.device) -> None:
        self.folder, self.device = folder, device
        self.model = None
        self.settings: dict = {}
        self.load_seconds = 0.0
        self.held_bytes = 0

    def get(self):
        if self.model is None:
            before = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else 0
            started = time.perf_counter()
            self.model, self.settings = load_hf(self.folder, self.device)
            _sync(self.device)
            self.load_seconds = time.perf_counter() - started
            if self.device.type == "cuda":
                self.held_bytes = torch.cuda.memory_allocated(self.device) - before
        return self.model

    def close(self) -> None:
        self.model = None
        torch.compiler.reset()  # the compiled decoding graphs hold the model


def hf_generate(generator: HFGenerator, num_samples: int, length: int) -> HFRun:
    """``model.generate`` from ``<bos>`` alone: sampling at temperature 1 over A/C/G/T (the export's
    generation_config suppresses every other token, EOS included, so every sample has ``length``
    bases), static KV cache, all samples in one batch. Should the compiled decoding fail, it runs
    again uncompiled (``disable_compile``), which the details say."""
    model = generator.get()
    device = generator.device
    bos = torch.full((num_samples, 1), BOS_ID, dtype=torch.long, device=device)
    options = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=length,
                   cache_implementation="static")
    details: dict = {**generator.settings, "generate": dict(options), "auto_compile": device.type == "cuda",
                     "suppress_tokens": len(model.generation_config.suppress_tokens or [])}
    _sync(device)
    started = time.perf_counter()
    with torch.inference_mode():
        try:
            out = model.generate(bos, attention_mask=torch.ones_like(bos), **options).cpu()
        except torch.OutOfMemoryError:
            raise
        except Exception as err:
            if device.type != "cuda":
                raise
            details["auto_compile"] = False
            details["compile_error"] = f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]
            torch.compiler.reset()
            started = time.perf_counter()
            out = model.generate(bos, attention_mask=torch.ones_like(bos), disable_compile=True, **options).cpu()
    _sync(device)
    compute = time.perf_counter() - started
    produced = int(out.shape[1] - 1)
    details["steps"] = produced
    details["held_bytes"] = generator.held_bytes
    return HFRun(generator.load_seconds + compute, compute, num_samples * produced, details)
