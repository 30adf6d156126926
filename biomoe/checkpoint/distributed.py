"""Distributed checkpoints: their full weights in one process, and a consolidated single-file export.

Lightning writes a distributed checkpoint as a directory (torch.distributed.checkpoint shards
for ``state_dict`` and ``optimizer_*`` plus ``meta.pt`` with the rest). Expert weights are stored
as global ``[E, …]`` tensors (they are DTensors sharded over EP), so a directory written at one EP
size loads at any other, and consolidation needs no knowledge of the layout that wrote it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from biomoe.checkpoint.safe_types import allow_checkpoint_types, trusted
from biomoe.compat.torch import load_checkpoint_keys

META_FILENAME = "meta.pt"  # lightning.fabric.utilities.load._METADATA_FILENAME


def load_model_state(dcp_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Full (unsharded) model weights of a Lightning distributed checkpoint, in one process.

    Keys are the LightningModule's (``model.blocks.0…``); no process group is needed.
    """
    return load_checkpoint_keys(dcp_dir, {"state_dict"})["state_dict"]


def consolidate(dcp_dir: str | os.PathLike, out_file: str | os.PathLike) -> Path:
    """Write a single-file Lightning checkpoint (weights, hyper-parameters, loop state) from
    ``dcp_dir``; optimizer state is left out (it is keyed by parameter name, not loadable by a
    single-device run). Load it with ``BioMoEModule.load_from_checkpoint`` or ``ckpt_path`` for
    validate/test/predict.
    """
    # imported here: checkpoint.save imports Lightning; reading weights and --help do without it
    from biomoe.checkpoint.save import atomic_torch_save

    dcp_dir = Path(dcp_dir)
    allow_checkpoint_types()  # meta.pt holds the hyper-parameters: data, unless the user trusts it fully
    checkpoint = torch.load(dcp_dir / META_FILENAME, map_location="cpu", weights_only=not trusted())
    checkpoint["state_dict"] = load_model_state(dcp_dir)
    checkpoint.pop("optimizer_states", None)
    checkpoint.pop("lr_schedulers", None)
    atomic_torch_save(checkpoint, out_file)
    return Path(out_file)


def main(argv: list[str] | None = None) -> int:
    """``python -m biomoe.checkpoint.distributed DCP_DIR OUT.ckpt``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dcp_dir")
    parser.add_argument("out_file")
    args = parser.parse_args(argv)
    print(consolidate(args.dcp_dir, args.out_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
