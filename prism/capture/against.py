"""What torch would run in Prism's place: a cone's time as the rest runs it, beside Prism's best.

A user of `backend="prism"` expects Prism to add speed or stay out of the way, so a cone is Prism's only where
its best kernels beat what torch would run for the same ops: Inductor's kernels for them (cuBLAS for a large
matmul, its own fusions), or the ATen ops themselves when the rest runs eagerly. On a GPU `torch_us` times the
cone's own ATen ops, compiled as the rest compiles them, the way the tuner times Prism's candidates: a CUDA-graph
replay over rotated copies of random inputs of the cone's sizes, dtypes and strides (prism.tune.profile). `verdict`
then keeps the cone with torch when torch is not slower, and says both times. Without a GPU nothing is timed:
the cost model cannot price cuBLAS or Inductor, so the rule that no fused kernel beat Prism's unfused program
decides alone (prism.capture.backend._fused), and the record names the rule it used.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import torch

from prism.capture.dynamic import standalone
from prism.errors import PrismError

__all__ = ["COST_MODEL_RULE", "TIMED_RULE", "torch_us", "verdict"]

log = logging.getLogger("prism.compile")

TIMED_RULE = "timed against torch"
"""The record's `rule` where torch's time for the cone was measured beside Prism's best."""
COST_MODEL_RULE = "torch not timed (no GPU): kept where a fused kernel beats Prism's unfused program"
"""The record's `rule` where nothing could be timed."""


def torch_us(nodes: Sequence[Any], inputs: Sequence[Any], roots: Sequence[Any], device: torch.device,
             rest: str) -> float | None:
    """Median µs of one replay of the cone (`nodes` reading `inputs`, computing `roots`) as torch runs it: compiled
    by Inductor (`rest` "inductor") or its ATen ops as they are ("eager"); None without a GPU, or where an input is
    not a floating-point tensor of known sizes (the cone's values could not be drawn at random)."""
    if device.type != "cuda":
        return None
    vals = [n.meta.get("val") for n in inputs]
    if not all(isinstance(v, torch.Tensor) and v.is_floating_point()
               and all(isinstance(d, int) for d in (*v.shape, *v.stride())) for v in vals):
        return None
    from prism.tune.profile import bench_graph, input_copies

    graph, _ = standalone(nodes, inputs, roots)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    args = [_random(v, device, k) for k, v in enumerate(vals)]
    with torch._guards.tracing(None):   # a compile of its own, outside the one Dynamo is running
        if rest == "inductor":
            from torch._inductor.compile_fx import compile_fx

            module = compile_fx(module, args)
        return bench_graph(module, input_copies(args)) * 1e6


def _random(like: torch.Tensor, device: torch.device, seed: int) -> torch.Tensor:
    """A tensor of `like`'s sizes, strides and dtype on `device`, uniform in ±[0.5, 1.5)/sqrt(last dim), as the
    tuner times Prism's candidates on (prism.tune.profile.random_inputs)."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.rand(like.shape, generator=gen) * 2 - 1
    v = (v + torch.where(v < 0, -0.5, 0.5)) / math.sqrt(like.shape[-1] if like.dim() else 1)
    out = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=device)
    return out.copy_(v)


def verdict(prism_us: float | None, torch_us: float | None) -> dict[str, Any]:
    """What the record says of the comparison (its `rule`, and torch's time where measured); a PrismError (the
    cone stays with torch) when torch's time is not above Prism's best."""
    if torch_us is None:
        return {"rule": COST_MODEL_RULE}
    if prism_us is None or torch_us <= prism_us:
        best = "none" if prism_us is None else f"{prism_us:.2f} µs"
        raise PrismError(f"torch {torch_us:.2f} µs, Prism's best {best}: torch runs these ops")
    return {"rule": TIMED_RULE, "torch_us": torch_us}
