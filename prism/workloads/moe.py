"""An MoE expert layer: O = exp(X @ W1) @ W2 for every expert at once, as batched 3-D matmuls
(X [e, n, d] holds the n tokens routed to each of e experts, W1 [e, d, f], W2 [e, f, d]).

The activation between the two matmuls is exp, as in the issue that asked for this program; any
element-wise one fuses the same way. The fused kernel is attention's without the softmax denominator:
a block per (expert, split of f) keeps its tokens' X tile, walks its share of f, and accumulates
exp(X @ W1 tile) @ W2 tile; the splits' sums meet at the output (its saver leaves y unmapped). The
intermediate [e, n, f] never reaches memory.
"""

from __future__ import annotations

import torch

from prism.ir import BlockGraph, KernelGraph, Tensor
from prism.workloads.base import Config, Workload, default_tile

__all__ = ["MOE"]


def _declare(g: KernelGraph, cfg: Config, dtype: str) -> tuple[Tensor, Tensor, Tensor]:
    e, n, d, f = cfg["e"], cfg["n"], cfg["d"], cfg["f"]
    return g.input((e, n, d), dtype, "X"), g.input((e, d, f), dtype, "W1"), g.input((e, f, d), dtype, "W2")


def _graph(cfg: Config, dtype: str) -> KernelGraph:
    g = KernelGraph()
    x, w1, w2 = _declare(g, cfg, dtype)
    g.output(g.matmul(g.exp(g.matmul(x, w1)), w2))
    return g


def _fused(cfg: Config, dtype: str, *, splits: int = 1, loop: int | None = None) -> KernelGraph:
    """One kernel: grid (expert, split of f), the loop over the split's f tiles (default: 64 wide)."""
    g = KernelGraph()
    x, w1, w2 = _declare(g, cfg, dtype)
    f = cfg["f"]
    k = BlockGraph(grid=(cfg["e"], splits), loop=f // default_tile(f) // splits if loop is None else loop)
    bx = k.input(x, imap={"x": 0})                                   # X tile [1, n, d], every iteration
    b1 = k.input(w1, imap={"x": 0, "y": 2}, fmap=2)                  # W1 tile [1, d, f/(splits·loop)]
    b2 = k.input(w2, imap={"x": 0, "y": 1}, fmap=1)                  # W2 tile [1, f/(splits·loop), d]
    k.output(k.accum(k.matmul(k.exp(k.matmul(bx, b1)), b2)), omap={"x": 0})   # y summed across blocks
    (o,) = g.custom(k, [x, w1, w2])
    g.output(o)
    return g


def _scales(cfg: Config) -> dict[str, float]:
    """X is O(1); W1 is 1/sqrt(d), so exp's arguments are O(1) and stay far from float16's overflow; W2 is
    1/sqrt(f), so the output's entries are O(1)."""
    return {"X": 1.0, "W1": cfg["d"] ** -0.5, "W2": cfg["f"] ** -0.5}


def _reference(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.exp(x @ w1) @ w2


MOE = Workload(
    name="moe", program="O = exp(X @ W1) @ W2, batched over experts", dims=("e", "n", "d", "f"),
    real_configs=({"e": 8, "n": 16, "d": 2048, "f": 1408},),   # DeepSeek-MoE-16B's expert shape, 16 tokens each
    fused_params=("splits", "loop"),
    graph_fn=_graph, reference_fn=_reference, scales_fn=_scales, fused_fn=_fused,
    display="MoE expert", small={"e": 2, "n": 4, "d": 32, "f": 64}, medium={"e": 2, "n": 4, "d": 64, "f": 256})
