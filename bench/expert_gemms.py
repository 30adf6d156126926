"""The expert GEMMs alone: are grouped GEMMs fast enough for experts to pay?

One MoE MLP's training step does six matrix products: up-projection (with SwiGLU) and
down-projection forward; the activation gradient, the two weight gradients and the input gradient
backward. Its dense twin (same active parameters per token) does the same six over the same
FLOPs as plain GEMMs. If the grouped six cannot come close to the dense six, no fusion around them
makes the MoE step as fast as the dense one.

Three sets of kernels are timed on the same random top-k routing:

* ``dense``: the dense twin's six products through ``torch.mm`` (cuBLAS).
* ``torch``: today's ``grouped`` expert backend: an ``index_select`` of k copies of every token,
  then ``torch._grouped_mm`` forward and backward (autograd), SwiGLU between.
* ``quack``: quack-kernels' grouped GEMMs with the gather folded into the operand load and SwiGLU
  (and its gradient, the routing-score scale and the score gradient) in the epilogue. Each of the
  six ops is timed with quack's default tile configuration and, with ``--sweep``, with each tile
  configuration of :data:`SWEEP`; the fastest per op counts (what an autotuner would choose).

Each quack op is first checked against a float32 reference of the same product on fresh
unit-scale inputs (``‖out − ref‖ / ‖ref‖``). Timings are ``triton.testing.do_bench`` medians.

    python -m bench.expert_gemms --sizes base,4x --variants moe,fine,fine64 --sweep \
        --out results/experts/gemms
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.expert_contenders import SIZES, variant_settings
from biomoe.files import write_text

DENSE_TOP_K = 2
"""The study's dense twin is ``ffn_hidden_size * top_k`` wide with the 8 x top-2 MoE's top-k."""

OPS = ("up+swiglu", "down", "dswiglu", "dW_down", "dW_up", "dx")
"""The six products of one expert MLP's training step, in the order they run."""

IMPLS = ("quack", "triton")
"""The grouped-GEMM kernel families ``--impls`` may time against the dense twin."""

SWEEP = [  # (tile_m, tile_n, pingpong, cluster_m): SM90 candidates of quack's own autotune list
    (128, 128, True, 2), (128, 192, True, 1), (128, 256, False, 2), (256, 128, False, 2),
    (256, 192, False, 2), (128, 128, True, 1), (128, 64, True, 1), (128, 96, True, 1), (192, 128, True, 1),
]


@dataclass(frozen=True)
class Shape:
    """One expert MLP: tokens, model width, experts, top-k and expert width."""

    size: str
    variant: str
    tokens: int
    hidden: int
    experts: int
    top_k: int
    ffn: int

    @property
    def dense_ffn(self) -> int:
        return self.ffn * self.top_k

    @property
    def step_flops(self) -> float:
        """Six products over ``tokens * top_k`` rows: 3 x (up 2·H·2F + down 2·H·F) per row."""
        return 3 * 2 * self.tokens * self.top_k * (self.hidden * 2 * self.ffn + self.hidden * self.ffn)


def shape_for(size: str, variant: str, tokens: int) -> Shape:
    base = SIZES[size]
    cfg = {"num_experts": 8, "top_k": 2, "ffn_hidden_size": base["ffn_hidden_size"]}
    cfg.update(variant_settings(variant, base["ffn_hidden_size"]))
    return Shape(size, variant, tokens, base["hidden_size"], int(cfg["num_experts"]), int(cfg["top_k"]),
                 int(cfg["ffn_hidden_size"]))


@dataclass
class Routing:
    """Random top-k routing, sorted by expert: what the layer hands its expert kernels."""

    token_of_row: torch.Tensor  # [rows] int32: the token each expert-sorted row reads
    offsets: torch.Tensor  # [E + 1] int32: expert e owns rows offsets[e]:offsets[e+1]
    scores: torch.Tensor  # [rows] float32: the routing weight of each row


def random_routing(tokens: int, experts: int, top_k: int, device: torch.device, skew: float = 0.0) -> Routing:
    """Each token picks ``top_k`` distinct experts; ``skew`` > 0 favours low-numbered experts."""
    logits = torch.rand(tokens, experts, device=device)
    if skew:
        logits = logits + skew * torch.linspace(1, 0, experts, device=device)
    picked = logits.topk(top_k, dim=1).indices.reshape(-1)
    order = torch.argsort(picked, stable=True)
    counts = torch.bincount(picked, minlength=experts)
    offsets = torch.zeros(experts + 1, dtype=torch.int32, device=device)
    offsets[1:] = torch.cumsum(counts, 0)
    scores = torch.softmax(torch.randn(tokens, top_k, device=device), dim=1).reshape(-1)[order]
    return Routing((order // top_k).to(torch.int32), offsets, scores.float().contiguous())


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


class Inputs:
    """Unit-scale operands of one shape: activations, expert weights, output gradient."""

    def __init__(self, shape: Shape, device: torch.device, skew: float = 0.0) -> None:
        s = shape
        g = torch.Generator(device=device).manual_seed(zlib.crc32(f"{s.size} {s.variant} {skew}".encode()))

        def randn(*dims: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*dims, device=device, generator=g) * scale).to(torch.bfloat16)

        self.x = randn(s.tokens, s.hidden)
        self.gate_up = randn(s.experts, 2 * s.ffn, s.hidden, scale=s.hidden ** -0.5)
        self.down = randn(s.experts, s.hidden, s.ffn, scale=s.ffn ** -0.5)
        self.dout = randn(s.tokens, s.hidden)
        self.routing = random_routing(s.tokens, s.experts, s.top_k, device, skew)


# ------------------------------------------------------------------------------------ kernels
def quack_ops(inp: Inputs, config=None) -> dict[str, callable]:
    """The six quack calls (each a closure over its inputs), plus the reference checks' inputs."""
    from quack.gemm_interface import gemm_act, gemm_dact, gemm_tuned

    r = inp.routing
    cu, idx = r.offsets, r.token_of_row
    rows = idx.numel()
    E, twoF, H = inp.gate_up.shape
    w_up = inp.gate_up.transpose(1, 2)  # (E, H, 2F), [gate; up] along 2F
    w_down_t = inp.down.transpose(1, 2)  # (E, F, H)
    z, y1 = gemm_act(inp.x, w_up, activation="swiglu", cu_seqlens_m=cu, A_idx=idx, concat_layout=("B",),
                     tuned=False)
    dz, y1s, _ = gemm_dact(inp.dout, inp.down, PreAct=z, activation="swiglu", colvec_scale=r.scores,
                           colvec_reduce=True, cu_seqlens_m=cu, A_idx=idx, tuned=False)
    out_rows = torch.empty(rows, H, dtype=torch.bfloat16, device=inp.x.device)
    dw_down = torch.empty(E, H, twoF // 2, dtype=torch.bfloat16, device=inp.x.device)
    dw_up = torch.empty(E, H, twoF, dtype=torch.bfloat16, device=inp.x.device)
    dx_rows = torch.empty(rows, H, dtype=torch.bfloat16, device=inp.x.device)
    tuned = False

    def plain(A, B, out, **kw):
        return gemm_tuned.fn(A, B, out, config=config, **kw)

    act_kw = {"config": config} if config is not None else {}
    return {
        "up+swiglu": lambda: gemm_act(inp.x, w_up, activation="swiglu", cu_seqlens_m=cu, A_idx=idx,
                                      concat_layout=("B",), preact_out=z, postact_out=y1, tuned=tuned, **act_kw),
        "down": lambda: plain(y1, w_down_t, out_rows, cu_seqlens_m=cu),
        "dswiglu": lambda: gemm_dact(inp.dout, inp.down, PreAct=z, activation="swiglu", colvec_scale=r.scores,
                                     colvec_reduce=True, cu_seqlens_m=cu, A_idx=idx, dx_out=dz, postact_out=y1s,
                                     tuned=tuned, **act_kw),
        "dW_down": lambda: plain(inp.dout.T, y1s, dw_down, cu_seqlens_k=cu, A_idx=idx),
        "dW_up": lambda: plain(inp.x.T, dz, dw_up, cu_seqlens_k=cu, A_idx=idx),
        "dx": lambda: plain(dz, inp.gate_up, dx_rows, cu_seqlens_m=cu, concat_layout=("B",)),
        "_outputs": (z, y1, out_rows, dz, y1s, dw_down, dw_up, dx_rows),
    }


def reference(inp: Inputs) -> dict[str, torch.Tensor]:
    """The six products in float32 per expert on the same operands (pre-activation and weights
    gate first): the activation, the output rows, the pre-activation's gradient with the score
    scale, the routing weights' gradient, both weight gradients and the input gradient per row."""
    r = inp.routing
    cu = r.offsets.tolist()
    x_rows = inp.x.float().index_select(0, r.token_of_row.long())
    g_rows = inp.dout.float().index_select(0, r.token_of_row.long())
    F_ = inp.down.shape[-1]
    ref = {k: [] for k in ("act", "out", "dpre", "dscore", "dw_down", "dw_up", "dx")}
    for e in range(len(cu) - 1):
        a, b = cu[e], cu[e + 1]
        xe, ge, se = x_rows[a:b], g_rows[a:b], r.scores[a:b, None]
        w1, w2 = inp.gate_up[e].float(), inp.down[e].float()
        pre = xe @ w1.T
        gate, up = pre[:, :F_], pre[:, F_:]
        act = F.silu(gate) * up
        ref["act"].append(act)
        ref["out"].append(act @ w2.T)
        dact_unscaled = ge @ w2
        dact = se * dact_unscaled
        sig = torch.sigmoid(gate)
        dgate = dact * up * sig * (1 + gate * (1 - sig))
        dup = dact * F.silu(gate)
        dpre = torch.cat([dgate, dup], dim=1)  # [gate; up] order
        ref["dpre"].append(dpre)
        ref["dscore"].append((dact_unscaled * act).sum(1))
        ref["dw_down"].append((ge * se).T @ act)  # (H, F): the score-scaled output gradient
        ref["dw_up"].append(xe.T @ dpre)  # (H, 2F) in [gate; up] order
        ref["dx"].append(dpre @ w1)
    return {k: torch.stack(v) if k.startswith("dw") else torch.cat(v) for k, v in ref.items()}


def quack_check(inp: Inputs) -> dict[str, float]:
    """Relative error of each quack op against float32 torch on the same operands."""
    ops = quack_ops(inp)
    outputs = ops.pop("_outputs")
    for op in OPS:
        ops[op]()
    torch.cuda.synchronize()
    z, y1, out_rows, dz, y1s, dw_down, dw_up, dx_rows = outputs
    cat = reference(inp)

    def deinterleave(t: torch.Tensor) -> torch.Tensor:  # [g0, u0, g1, u1, ...] -> [gate; up]
        return torch.cat([t[..., ::2], t[..., 1::2]], dim=-1)

    return {
        "up+swiglu": rel_error(y1, cat["act"]),
        "down": rel_error(out_rows, cat["out"]),
        "dswiglu": rel_error(deinterleave(dz), cat["dpre"]),
        "dW_down": rel_error(dw_down, cat["dw_down"]),
        "dW_up": rel_error(deinterleave(dw_up), cat["dw_up"]),
        "dx": rel_error(dx_rows, cat["dx"]),
    }


def triton_ops(inp: Inputs) -> dict[str, object]:
    """The six Triton products (:mod:`bench.triton_expert_gemms`) as closures, and their outputs."""
    from bench.triton_expert_gemms import expert_step

    r = inp.routing
    return expert_step(inp.x, inp.gate_up, inp.down, inp.dout, r.token_of_row, r.offsets, r.scores)


def triton_check(inp: Inputs) -> dict[str, float]:
    """Relative error of each Triton op against float32 torch (the routing weights' gradient
    counts towards the activation-gradient op that computes it)."""
    ops = triton_ops(inp)
    out = ops.pop("_outputs")
    for op in OPS:
        ops[op]()  # the first call of a shape autotunes, running the kernel once per candidate
        ops[op]()
    torch.cuda.synchronize()
    cat = reference(inp)
    return {
        "up+swiglu": rel_error(out["act"], cat["act"]),
        "down": rel_error(out["out"], cat["out"]),
        "dswiglu": max(rel_error(out["dpre"], cat["dpre"]), rel_error(out["dscore"], cat["dscore"])),
        "dW_down": rel_error(out["dw_down"], cat["dw_down"]),
        "dW_up": rel_error(out["dw_up"], cat["dw_up"]),
        "dx": rel_error(out["dx"], cat["dx"]),
    }


def dense_ops(shape: Shape, device: torch.device) -> dict[str, callable]:
    """The dense twin's six products through ``torch.mm`` (cuBLAS), nn.Linear weight layout."""
    N, H, Fd = shape.tokens, shape.hidden, shape.dense_ffn
    t = {name: torch.randn(*dims, device=device, dtype=torch.bfloat16) for name, dims in {
        "x": (N, H), "w1": (2 * Fd, H), "w2": (H, Fd), "y": (N, Fd), "dout": (N, H), "dz": (N, 2 * Fd)}.items()}
    return {
        "up+swiglu": lambda: torch.mm(t["x"], t["w1"].T),
        "down": lambda: torch.mm(t["y"], t["w2"].T),
        "dswiglu": lambda: torch.mm(t["dout"], t["w2"]),
        "dW_down": lambda: torch.mm(t["dout"].T, t["y"]),
        "dW_up": lambda: torch.mm(t["dz"].T, t["x"]),
        "dx": lambda: torch.mm(t["dz"], t["w1"]),
    }


def dense_swiglu_ops(shape: Shape, device: torch.device) -> dict[str, callable]:
    """The dense twin's SwiGLU forward and backward, each one compiled (fused) kernel: the
    elementwise passes its step makes around the GEMMs, which quack's epilogues fold in."""
    N, Fd = shape.tokens, shape.dense_ffn
    pre = torch.randn(N, 2 * Fd, device=device, dtype=torch.bfloat16)
    dy = torch.randn(N, Fd, device=device, dtype=torch.bfloat16)

    def forward(pre: torch.Tensor) -> torch.Tensor:
        gate, up = pre.chunk(2, dim=1)
        return F.silu(gate) * up

    def backward(pre: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        gate, up = pre.float().chunk(2, dim=1)
        sig = torch.sigmoid(gate)
        dgate = dy.float() * up * sig * (1 + gate * (1 - sig))
        return torch.cat([dgate, dy.float() * gate * sig], dim=1).to(pre.dtype)

    fwd, bwd = torch.compile(forward), torch.compile(backward)
    return {"swiglu fwd": lambda: fwd(pre), "swiglu bwd": lambda: bwd(pre, dy)}


def torch_grouped_step(inp: Inputs):
    """Today's ``grouped`` backend, forward and backward, on rows gathered by ``index_select``."""
    from biomoe.model.moe.experts import GroupedMMBackend

    backend = GroupedMMBackend()
    r = inp.routing
    counts = (r.offsets[1:] - r.offsets[:-1]).long()
    x = inp.x.detach().requires_grad_(True)
    w1 = inp.gate_up.detach().requires_grad_(True)
    w2 = inp.down.detach().requires_grad_(True)
    idx = r.token_of_row.long()

    def step():
        rows = x.index_select(0, idx)
        out = backend(rows, counts, w1, w2)
        out.backward(inp.dout.index_select(0, idx))

    return step


# ------------------------------------------------------------------------------------ timing
def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=50, rep=200, return_mode="median"))


def sweep_configs():
    from quack.gemm_config import GemmConfig

    return [GemmConfig(tile_m=m, tile_n=n, pingpong=p, cluster_m=c, cluster_n=1, is_dynamic_persistent=False,
                       device_capacity=9) for m, n, p, c in SWEEP]


def sweep_quack(row: dict, inp: Inputs) -> None:
    """Each quack op with each tile configuration of :data:`SWEEP` (a refusal is recorded)."""
    for cfg in sweep_configs():
        label = f"{cfg.tile_m}x{cfg.tile_n}{'pp' if cfg.pingpong else 'co'}c{cfg.cluster_m}"
        try:
            pinned = quack_ops(inp, cfg)
        except Exception as exc:  # a config the kernel refuses for this shape
            row.setdefault("sweep_refused", {})[label] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        pinned.pop("_outputs")
        for op in OPS:
            try:
                row["quack_ms"][op][label] = bench_ms(pinned[op])
            except Exception as exc:
                row.setdefault("sweep_refused", {})[f"{op} {label}"] = f"{type(exc).__name__}: {exc}"[:200]


def measure(shape: Shape, device: torch.device, sweep: bool, impls: tuple[str, ...] = ("quack",)) -> dict:
    row: dict = {"size": shape.size, "variant": shape.variant, "tokens": shape.tokens, "hidden": shape.hidden,
                 "experts": shape.experts, "top_k": shape.top_k, "ffn": shape.ffn, "dense_ffn": shape.dense_ffn,
                 "step_gflop": shape.step_flops / 1e9}
    dense = dense_ops(shape, device)
    row["dense_ms"] = {op: bench_ms(dense[op]) for op in OPS}
    row["dense_swiglu_ms"] = {op: bench_ms(fn) for op, fn in dense_swiglu_ops(shape, device).items()}
    inp = Inputs(shape, device)
    row["torch_grouped_step_ms"] = bench_ms(torch_grouped_step(inp))
    dense_total = sum(row["dense_ms"].values())
    row["dense_total_ms"] = dense_total
    row["dense_with_swiglu_ms"] = dense_total + sum(row["dense_swiglu_ms"].values())
    row["torch_grouped_over_dense"] = row["torch_grouped_step_ms"] / dense_total
    row["dense_tflops"] = shape.step_flops / dense_total / 1e9
    for impl in impls:
        started = time.perf_counter()
        check = quack_check if impl == "quack" else triton_check
        row[f"{impl}_error"] = check(Inputs(shape, device))
        row[f"{impl}_error_skewed"] = check(Inputs(shape, device, skew=4.0))
        ops = quack_ops(inp) if impl == "quack" else triton_ops(inp)
        ops.pop("_outputs")
        label = "default" if impl == "quack" else "autotuned"
        row[f"{impl}_ms"] = {op: {label: bench_ms(ops[op])} for op in OPS}
        if impl == "quack" and sweep:
            sweep_quack(row, inp)
        row[f"{impl}_seconds_incl_compile"] = time.perf_counter() - started
        best = {op: min(v.values()) for op, v in row[f"{impl}_ms"].items()}
        total = sum(best.values())
        row[f"{impl}_best_ms"] = best
        row[f"{impl}_total_ms"] = total
        row[f"{impl}_over_dense"] = total / dense_total
        row[f"{impl}_over_dense_with_swiglu"] = total / row["dense_with_swiglu_ms"]
        row[f"{impl}_tflops"] = shape.step_flops / total / 1e9
    return row


def environment() -> dict:
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("quack-kernels", "nvidia-cutlass-dsl", "triton"):
        try:
            from importlib.metadata import version

            env[name] = version(name)
        except Exception:
            env[name] = None
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="base,4x")
    parser.add_argument("--variants", default="moe,fine,fine64")
    parser.add_argument("--tokens", type=int, default=65536)
    parser.add_argument("--impls", default="quack", help="comma list of quack, triton: the expert kernels timed")
    parser.add_argument("--sweep", action="store_true", help="also time each quack tile configuration of SWEEP")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.impls.split(",")) - set(IMPLS))
    if unknown:
        print(f"biomoe: error: --impls: unknown {', '.join(unknown)} (known: {', '.join(IMPLS)})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("biomoe: error: bench.expert_gemms needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    report = {"command": "python -m bench.expert_gemms " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "environment": environment(),
              "impls": args.impls.split(","), "rows": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for size in args.sizes.split(","):
        for variant in args.variants.split(","):
            shape = shape_for(size, variant, args.tokens)
            print(f"[{datetime.now():%H:%M:%S}] {size} {variant}: E={shape.experts} k={shape.top_k} F={shape.ffn}",
                  flush=True)
            try:
                row = measure(shape, device, args.sweep, tuple(report["impls"]))
            except Exception as exc:
                row = {"size": size, "variant": variant, "error": f"{type(exc).__name__}: {exc}"[:2000]}
                import traceback

                traceback.print_exc()
            report["rows"].append(row)
            write_text(args.out / "gemms.json", json.dumps(report, indent=1) + "\n")
            print(summary_line(row), flush=True)
    write_text(args.out / "gemms.md", table(report))
    print(table(report))
    return 0


def impls_of(report: dict) -> list[str]:
    return report.get("impls", ["quack"])


def summary_line(row: dict) -> str:
    if "error" in row:
        return f"  {row['size']} {row['variant']}: ERROR {row['error'][:300]}"
    parts = [f"  dense {row['dense_total_ms']:.3f} ms (with its SwiGLU passes {row['dense_with_swiglu_ms']:.3f}) | "
             f"torch grouped step {row['torch_grouped_step_ms']:.3f} ms ({row['torch_grouped_over_dense']:.2f}x)"]
    for impl in ("quack", "triton"):
        if f"{impl}_total_ms" in row:
            errs = ", ".join(f"{k} {v:.1e}" for k, v in row[f"{impl}_error"].items())
            parts.append(f"{impl} six {row[f'{impl}_total_ms']:.3f} ms ({row[f'{impl}_over_dense']:.2f}x dense, "
                         f"{row[f'{impl}_over_dense_with_swiglu']:.2f}x with SwiGLU) errors {errs}")
    return " | ".join(parts)


def table(report: dict) -> str:
    env = report["environment"]
    impls = impls_of(report)
    versions = ", ".join(f"{name} {env.get(name)}" for name in ("quack-kernels", "nvidia-cutlass-dsl", "triton")
                         if name in env)
    lines = ["# The expert GEMMs alone against the dense twin's\n",
             f"{env['gpu']}, torch {env['torch']}, {versions}; {report['date']}.\n",
             f"    {report['command']}\n",
             "Time of the six products of one training step (ms, `do_bench` medians), the ratio to the dense "
             "twin's six cuBLAS GEMMs over the same FLOPs, and the worst relative error against float32.\n",
             "The dense twin's step also runs SwiGLU forward and backward as separate (compiled, fused) "
             "elementwise passes that the grouped kernels' epilogues fold into their GEMMs: *dense + SwiGLU* adds "
             "them. *torch grouped layer* is today's `grouped` backend forward and backward (autograd), with its "
             "`index_select` gather of k copies of every token and SwiGLU.\n",
             "| size | variant | dense six | dense + SwiGLU | torch grouped layer | "
             + " | ".join(f"{i} six | {i} / dense six | {i} / dense + SwiGLU | {i} TFLOP/s | {i} worst error"
                          for i in impls) + " | dense TFLOP/s |",
             "| --- | --- | ---: | ---: | ---: |" + " ---: |" * (5 * len(impls) + 1)]
    for row in report["rows"]:
        if "error" in row:
            lines.append(f"| {row['size']} | {row['variant']} | failed: {row['error'][:120]} |"
                         + " |" * (5 * len(impls) + 3))
            continue
        cells = [f"{row['size']}", row["variant"], f"{row['dense_total_ms']:.3f}", f"{row['dense_with_swiglu_ms']:.3f}",
                 f"{row['torch_grouped_step_ms']:.3f} ({row['torch_grouped_over_dense']:.2f}x)"]
        for i in impls:
            worst = max(max(row[f"{i}_error"].values()), max(row[f"{i}_error_skewed"].values()))
            cells += [f"{row[f'{i}_total_ms']:.3f}", f"{row[f'{i}_over_dense']:.2f}x",
                      f"{row[f'{i}_over_dense_with_swiglu']:.2f}x", f"{row[f'{i}_tflops']:.0f}", f"{worst:.1e}"]
        cells.append(f"{row['dense_tflops']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("\nPer op (ms): dense / " + " / ".join(f"{i} best (tile)" for i in impls) + "\n")
    lines.append("| size | variant | " + " | ".join(OPS) + " |")
    lines.append("| --- | --- |" + " ---: |" * len(OPS))
    for row in report["rows"]:
        if "error" in row:
            continue
        cells = []
        for op in OPS:
            parts = [f"{row['dense_ms'][op]:.3f}"]
            for i in impls:
                tiles = row[f"{i}_ms"][op]
                tile = min(tiles, key=tiles.get)
                parts.append(f"{tiles[tile]:.3f} ({tile})")
            cells.append(" / ".join(parts))
        lines.append(f"| {row['size']} | {row['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
