"""The model card (``README.md``) of an exported folder, from what the checkpoint records.

A card is only useful when it is true, so every number comes from the checkpoint: the shape from
its ModelConfig, the training data from the datamodule hyper-parameters ``fit`` saves, the step
count from ``global_step`` and held-out bits/base from the ModelCheckpoint callback state that
monitors ``val/bits_per_base``. What the checkpoint does not hold is said to be not recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biomoe.checkpoint.read import read_checkpoint_or_none, recorded
from biomoe.checkpoint.run_folder import MONITOR
from biomoe.model.config import ModelConfig

__all__ = ["TrainingRecord", "training_record", "model_card"]


@dataclass
class TrainingRecord:
    """What a checkpoint says about how it was trained (None/empty where it does not say)."""

    global_step: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    bits_per_base: float | None = None
    """Held-out bits/base of this checkpoint, or of the run's best one (see ``score_source``)."""
    score_source: str = ""


def _ckpt_name(path: Any) -> str:
    return Path(os.fspath(path)).name if path else ""


def training_record(ckpt_path: str | os.PathLike[str]) -> TrainingRecord:
    """Read steps, data settings and the recorded validation score (memory-mapped: no weights read)."""
    ckpt = read_checkpoint_or_none(ckpt_path)
    if ckpt is None:
        return TrainingRecord()
    record = TrainingRecord()
    if isinstance(ckpt.get("global_step"), int):
        record.global_step = ckpt["global_step"]
    record.data = recorded(ckpt, "datamodule_hyper_parameters")
    _read_score(record, ckpt, Path(ckpt_path), own_only=True)
    if record.bits_per_base is None:
        # A best-* checkpoint is written before its ModelCheckpoint records its score; a later
        # checkpoint of the same run (last.ckpt, written when training ends) holds it.
        for sibling in sorted(Path(ckpt_path).parent.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True):
            if sibling.resolve() == Path(ckpt_path).resolve():
                continue
            other = read_checkpoint_or_none(sibling)
            if other is not None:
                _read_score(record, other, Path(ckpt_path), own_only=True)
            if record.bits_per_base is not None:
                break
    if record.bits_per_base is None:
        _read_score(record, ckpt, Path(ckpt_path))  # the run's best at the time this file was written
    return record


def _read_score(record: TrainingRecord, ckpt: Mapping[str, Any], path: Path, own_only: bool = False) -> None:
    """The held-out score of ``path`` from one checkpoint's ModelCheckpoint state (``own_only``:
    only a score recorded for ``path`` itself, not the run's best)."""
    for key, state in (ckpt.get("callbacks") or {}).items():
        if not (str(key).startswith("ModelCheckpoint") and isinstance(state, Mapping)):
            continue
        if state.get("monitor") != MONITOR:
            continue
        own = {_ckpt_name(p): s for p, s in (state.get("best_k_models") or {}).items()}
        if path.name in own and own[path.name] is not None:
            record.bits_per_base, record.score_source = float(own[path.name]), "this checkpoint"
        elif not own_only and state.get("best_model_score") is not None:
            record.bits_per_base = float(state["best_model_score"])
            record.score_source = f"the run's best checkpoint, {_ckpt_name(state.get('best_model_path'))}"
        elif own_only and _ckpt_name(state.get("best_model_path")) == path.name \
                and state.get("best_model_score") is not None:
            record.bits_per_base, record.score_source = float(state["best_model_score"]), "this checkpoint"
        break


def _fasta_names(data: Mapping[str, Any]) -> list[str]:
    fasta = data.get("fasta")
    if fasta is None:
        return []
    return [os.fspath(f) for f in ([fasta] if isinstance(fasta, (str, os.PathLike)) else list(fasta))]


def _split_lines(data: Mapping[str, Any]) -> list[str]:
    """The held-out split as the datamodule settings define it."""
    lines = []
    for kind in ("val", "test"):
        files, contigs, fraction = (data.get(f"{kind}_files"), data.get(f"{kind}_contigs"),
                                    data.get(f"{kind}_fraction"))
        label = "validation" if kind == "val" else "test"
        if files:
            lines.append(f"- {label}: whole files {', '.join(f'`{Path(os.fspath(f)).name}`' for f in files)}")
        elif contigs:
            lines.append(f"- {label}: whole contigs {', '.join(f'`{c}`' for c in contigs)}")
        elif fraction:
            lines.append(f"- {label}: the last {float(fraction):.0%} of every contig")
    return lines


def _count(n: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def model_card(cfg: ModelConfig, total_params: int, record: TrainingRecord, source_name: str) -> str:
    """README.md text: what the model is, how it was trained, how well it does, how to use it."""
    lowercase = ("lower-case bases are read as upper case" if record.data.get("fold_lowercase", True)
                 else "lower-case (soft-masked) bases are read as unknown, as in training")
    lines = [
        "---", "library_name: transformers", "pipeline_tag: text-generation",
        "tags: [biology, genomics, dna, mixture-of-experts, mixtral, biomoe]", "---", "",
        "# biomoe DNA language model", "",
        f"A Mixture-of-Experts DNA language model trained with biomoe and exported from `{source_name}` as "
        f"`MixtralForCausalLM`. It reads one token per base (A, C, G, T, N and the IUPAC ambiguity codes; "
        f"{lowercase}) and predicts the next base.", "",
        "## Model", "",
        f"- {cfg.num_layers} layers, hidden size {cfg.hidden_size}, {cfg.num_heads} attention heads "
        f"({cfg.num_kv_heads} key/value heads), rotary embeddings (theta {cfg.rope_theta:g})",
        f"- {cfg.num_experts} experts per layer (SwiGLU, hidden size {cfg.ffn_hidden_size}), "
        f"{cfg.top_k} active per token",
        f"- {_count(total_params)} parameters in all, {_count(cfg.active_params_per_token())} active per token "
        "(embedding lookup excluded)",
        f"- vocabulary: 19 tokens (ids 0-18), embedding table padded to {cfg.vocab_size}", "",
        "## Training", "",
    ]
    fasta = _fasta_names(record.data)
    if fasta:
        lines.append("- FASTA: " + ", ".join(f"`{Path(f).name}`" for f in fasta))
        if record.data.get("seq_length"):
            lines.append(f"- context: {record.data['seq_length']} bases per window")
        lines.extend(_split_lines(record.data))
    else:
        lines.append("- training data: not recorded in the checkpoint")
    lines.append(f"- steps: {record.global_step}" if record.global_step is not None
                 else "- steps: not recorded in the checkpoint")
    lines += ["", "## Evaluation", ""]
    if record.bits_per_base is not None:
        lines.append(f"- held-out bits/base (`{MONITOR}`): {record.bits_per_base:.4f} ({record.score_source}; "
                     "2.0 is a uniform guess over A/C/G/T)")
    else:
        lines.append(f"- held-out bits/base (`{MONITOR}`): not recorded in the checkpoint")
    lines += [
        "", "## Usage", "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")',
        'model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")',
        'prompt = tokenizer("ACGTTGCA", return_tensors="pt")  # <bos> is prepended, as in training',
        "out = model.generate(**prompt, max_new_tokens=200)",
        "print(tokenizer.decode(out[0], skip_special_tokens=True))",
        "```", "",
        "`generation_config.json` samples at temperature 1 and suppresses every token but A, C, G and T, "
        "so `generate` writes plain DNA and runs until `max_new_tokens`.", "",
    ]
    return "\n".join(lines)
