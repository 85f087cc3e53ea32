"""LoRA: a linear layer plus its low-rank update, O = X @ W + (X @ A) @ B (X [n,d], W [d,o], A [d,r], B [r,o]).

The fused kernel is one block graph: block x owns a column tile of W and B, the loop walks d and
accumulates both X @ W and X @ A, and after the loop the rank-r product meets B. B's tile is the same in
every iteration (the loop does not walk it): a loop-invariant loader (prism.ir.kinds.INVARIANT), loaded
once and usable after the loop.

The search finds this form where the program chains two contractions (prism.search.generator.
chained_contraction); Mirage's benchmark set has LoRA, the paper does not.
"""

from __future__ import annotations

import torch

from prism.ir import BlockGraph, KernelGraph, Tensor
from prism.workloads.base import Config, Workload, default_tile

__all__ = ["LORA"]


def _declare(g: KernelGraph, cfg: Config, dtype: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n, d, r, o = cfg["n"], cfg["d"], cfg["r"], cfg["o"]
    return (g.input((n, d), dtype, "X"), g.input((d, o), dtype, "W"), g.input((d, r), dtype, "A"),
            g.input((r, o), dtype, "B"))


def _graph(cfg: Config, dtype: str) -> KernelGraph:
    g = KernelGraph()
    x, w, a, b = _declare(g, cfg, dtype)
    g.output(g.add(g.matmul(x, w), g.matmul(g.matmul(x, a), b)))
    return g


def _fused(cfg: Config, dtype: str, *, grid: int | None = None, loop: int | None = None) -> KernelGraph:
    """One kernel: grid x over the output's columns, the loop over d; B's column tile is loop-invariant."""
    g = KernelGraph()
    x, w, a, b = _declare(g, cfg, dtype)
    k = BlockGraph(grid=(cfg["o"] // default_tile(cfg["o"]) if grid is None else grid,),
                   loop=cfg["d"] // default_tile(cfg["d"]) if loop is None else loop)
    bx = k.input(x, fmap=1)                                  # X tile [n, d/loop]
    bw = k.input(w, imap={"x": 1}, fmap=0)                   # W tile [d/loop, o/grid]
    ba = k.input(a, fmap=0)                                  # A tile [d/loop, r]
    bb = k.input(b, imap={"x": 1})                           # B tile [r, o/grid], the same every iteration
    xw = k.accum(k.matmul(bx, bw))                           # X @ W tile [n, o/grid]
    xa = k.accum(k.matmul(bx, ba))                           # X @ A [n, r]
    k.output(k.add(xw, k.matmul(xa, bb)), omap={"x": 1}, shape=(cfg["n"], cfg["o"]))   # ragged grid: last tile partial
    (out,) = g.custom(k, [x, w, a, b])
    g.output(out)
    return g


def _scales(cfg: Config) -> dict[str, float]:
    """X is O(1); W and A are 1/sqrt(d) and B 1/sqrt(r), so every product's entries stay O(1)."""
    return {"X": 1.0, "W": cfg["d"] ** -0.5, "A": cfg["d"] ** -0.5, "B": cfg["r"] ** -0.5}


def _reference(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x @ w + (x @ a) @ b


LORA = Workload(
    name="lora", program="O = X @ W + (X @ A) @ B", dims=("n", "d", "r", "o"),
    real_configs=({"n": 16, "d": 256, "r": 16, "o": 4096},), fused_params=("grid", "loop"),
    graph_fn=_graph, reference_fn=_reference, scales_fn=_scales, fused_fn=_fused,
    display="LoRA", small={"n": 4, "d": 64, "r": 16, "o": 64},
    medium={"n": 4, "d": 128, "r": 16, "o": 128})
