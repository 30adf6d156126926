"""The optimizer step alone: each AdamW implementation on one network's parameters, against the
memory bandwidth a plain copy reaches.

The master-weight update is memory-bound, so its figure of merit is bytes moved per second: per
parameter the bf16 gradient is read and the fp32 master, both moments and the bf16 weight are read
and written (28 bytes with fp32 state, 24 with remainders or a bf16 first moment, 20 with both;
torch's AdamW on bf16 weights moves 14). Gradients are random: the kernels' time does not depend
on the values.

    python -m bench.optimizer_step --shape mixtral-2layer --out results/bench/optimizer-step
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from biomoe.checkpoint.optimizer_state import MOMENT_DTYPES
from biomoe.files import write_text

# (name, bytes moved per parameter, factory(params) -> optimizer); TE rows need Transformer Engine.
Factory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


def contenders(te: bool) -> list[tuple[str, int, Factory]]:
    from biomoe.training.optimization.compiled_adamw import CompiledAdamWWithMasterWeights

    rows: list[tuple[str, int, Factory]] = [
        ("torch AdamW fused, bf16 weights (no masters)", 14, lambda ps: torch.optim.AdamW(ps, lr=1e-4, fused=True))]
    if te:
        from biomoe.backends.te.optim import TEAdamWWithMasterWeights

        for storage, moments, nbytes in (("fp32", "fp32", 28), ("remainder", "fp32", 24), ("fp32", "bf16-first", 24)):
            rows.append((f"te FusedAdam, {storage} masters, {moments} moments", nbytes,
                         lambda ps, s=storage, m=moments: TEAdamWWithMasterWeights(ps, lr=1e-4, master_storage=s,
                                                                                   moment_dtype=m)))
    for storage, moments, nbytes in (("fp32", "fp32", 28), ("remainder", "fp32", 24), ("fp32", "bf16-first", 24),
                                     ("remainder", "bf16-first", 20)):
        rows.append((f"compiled, {storage} masters, {moments} moments", nbytes,
                     lambda ps, s=storage, m=moments: CompiledAdamWWithMasterWeights(
                         ps, lr=1e-4, master_storage=s, moment_dtypes=MOMENT_DTYPES[m])))
    return rows


def time_ms(fn: Callable[[], Any], iters: int, warmup: int, device: torch.device) -> list[float]:
    """Per-call times in ms of ``iters`` calls after ``warmup`` (the bench's :class:`StepClock`)."""
    from bench.timing import StepClock

    clock = StepClock(device)
    for _ in range(warmup + iters):
        clock.start()
        fn()
        clock.end()
    return clock.busy_ms(warmup, iters)


def measure(params: list[torch.Tensor], rows: list[tuple[str, int, Factory]], iters: int = 10,
            warmup: int = 3) -> list[dict[str, Any]]:
    """One record per row (the bandwidth reference first): median/min/max ms and the bytes per
    second they mean."""
    device = params[0].device
    count = sum(p.numel() for p in params)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3

    def reference() -> Factory:
        source = torch.empty(count, dtype=torch.float32, device=device)
        target = torch.empty_like(source)
        return lambda: target.copy_(source)

    results = []
    timed = [("copy of one fp32 buffer of as many elements (bandwidth reference)", 8, None)] + rows
    for name, nbytes, make in timed:
        step = reference() if make is None else make(params).step
        times = sorted(time_ms(step, iters, warmup, device))
        median = times[len(times) // 2]
        results.append({"optimizer": name, "bytes_per_param": nbytes, "ms": median, "ms_min": times[0],
                        "ms_max": times[-1], "tb_per_s": nbytes * count / median / 1e9})
        print(f"{name:66s} {median:8.2f} ms  {results[-1]['tb_per_s']:5.2f} TB/s", flush=True)
        del step  # the optimizer and its state go before the next one is built
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.optimizer_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="mixtral-2layer", help="a benchmark shape (bench.shapes.SHAPES)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True, help="folder for optimizer-step.json")
    args = parser.parse_args(argv)
    from biomoe.backends.te.availability import te_usable
    from bench.models import build_biomoe
    from bench.shapes import SHAPES

    if not torch.cuda.is_available():
        print("optimizer_step: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    model = build_biomoe(SHAPES[args.shape], "grouped", "bf16", device).model
    params = [p for p in model.parameters() if p.requires_grad]
    results = measure(params, contenders(te_usable(device)), iters=args.iters)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"shape": args.shape, "parameters": sum(p.numel() for p in params), "tensors": len(params),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "command": "python -m bench.optimizer_step " + " ".join(argv or sys.argv[1:]), "rows": results}
    write_text(args.out / "optimizer-step.json", json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
