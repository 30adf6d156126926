"""Load a trained model from a checkpoint and score sequences with it (no Trainer needed).

Scoring tools (FASTA scoring, variant effects, HF export, the notebook) need the bare
:class:`~biomoe.model.transformer.MoETransformer` and one function for per-base log-likelihoods; building a
Trainer and a datamodule for that would tie offline analysis to the training set-up.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from biomoe.checkpoint.hparams import model_config_from
from biomoe.checkpoint.run_folder import resolve_checkpoint
from biomoe.model.config import ConfigError
from biomoe.errors import GenomeInputError
from biomoe.model.losses import per_position_log_likelihood
from biomoe.model.backends import LayerBackends
from biomoe.model.transformer import MoETransformer
from biomoe.checkpoint.verify import check_checkpoint_file, verify_checkpoint
from biomoe.data.tokenizer import BOS_ID, NucleotideTokenizer

__all__ = ["load_model", "sequence_log_likelihood"]


def load_model(ckpt_path: str | os.PathLike[str], map_location: str = "cpu",
               expert_backend: str | None = "grouped") -> MoETransformer:
    """MoETransformer with the weights of a Lightning checkpoint (or of a run folder's best one), in eval mode.

    ``expert_backend`` overrides the training backend (a checkpoint trained with TE kernels must be
    scorable on a CPU); the weights are the same for every backend.
    """
    path = resolve_checkpoint(ckpt_path)  # a run folder -> its best checkpoint (said on stderr)
    check_checkpoint_file(path)
    if os.path.isdir(path):
        raise GenomeInputError(path, "is a folder (a distributed checkpoint?); this needs a checkpoint file: "
                                     f"python -m biomoe.checkpoint.distributed {path} model.ckpt")
    try:
        # integrity, structure, shapes against its hyper-parameters, finite weights: one line each
        ckpt = verify_checkpoint(path)
        cfg = model_config_from((ckpt.get("hyper_parameters") or {}).get("config"))
        model = MoETransformer(cfg, LayerBackends(experts=expert_backend or "grouped"))
        state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
        model.load_state_dict(state)
    except (GenomeInputError, ConfigError):
        raise
    except Exception as exc:  # a torch file that is not a biomoe checkpoint, or a damaged one
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:200] + "..."
        raise GenomeInputError(path, f"cannot load as a biomoe checkpoint ({type(exc).__name__}: {detail})") from None
    return model.eval()


@torch.no_grad()
def sequence_log_likelihood(model: MoETransformer, sequences: list[str] | list[np.ndarray],
                            tokenizer: NucleotideTokenizer | None = None, batch_size: int = 8) -> list[np.ndarray]:
    """Per-base log p(base | preceding bases) in nats for each sequence (fp32 numpy arrays).

    Inputs are ``[BOS] + bases[:-1]`` exactly as in training, so position t is conditioned on the
    bases before it in the same sequence. Non-ACGT positions get NaN: they are never scored (the
    training loss masks them too). Sequences of equal length are batched together.
    """
    tokenizer = tokenizer or NucleotideTokenizer()
    ids = [tokenizer.encode(s) if isinstance(s, str) else np.asarray(s, dtype=np.int64) for s in sequences]
    device = next(model.parameters()).device
    out: list[np.ndarray | None] = [None] * len(ids)
    by_length: dict[int, list[int]] = {}
    for i, arr in enumerate(ids):
        by_length.setdefault(len(arr), []).append(i)
    for length, members in by_length.items():
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            labels = torch.from_numpy(np.stack([ids[i] for i in chunk])).to(device)
            if length == 0:
                for i in chunk:
                    out[i] = np.zeros(0, dtype=np.float32)
                continue
            inputs = torch.cat([torch.full_like(labels[:, :1], BOS_ID), labels[:, :-1]], dim=1)
            logll = per_position_log_likelihood(model(inputs).logits, labels)
            logll = torch.where(tokenizer.unambiguous_mask(labels), logll, torch.full_like(logll, float("nan")))
            for row, i in enumerate(chunk):
                out[i] = logll[row].float().cpu().numpy()
    return out  # type: ignore[return-value]
