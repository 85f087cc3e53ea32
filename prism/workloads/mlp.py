"""RMSNorm, RMSNorm-MLP and SwiGLU: X [n,d] times one or two [d,d] weights, one shared fused pattern; and
RMSNorm-linear, RMSNorm with a non-square weight [d,o] (a projection that changes the width, as in
Mirage's benchmarks).

All three are `combine(norm(X) @ W1, norm(X) @ W2, ...)`, so one builder makes each kernel graph and
one makes each fused kernel: a grid over the weights' columns and a loop over d that accumulates every
X @ W tile (and, with the norm, sum(X²)), then an epilogue after the loop. The fused kernel divides by
the norm after the matmul, which is what lets rms_norm fuse at all: rms_norm(X) @ W = (X @ W) / r.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from prism.ir import BlockGraph, KernelGraph, Tensor
from prism.ir.builder import GraphBuilder
from prism.workloads.base import EPS, Config, PaperFigures, Workload, default_tile, rms_norm

__all__ = ["RMSNORM", "RMSNORM_LINEAR", "RMSNORM_MLP", "SWIGLU"]

Combine = Callable[[GraphBuilder, Sequence[Tensor]], Tensor]
"""Joins the projections into the output; written over graph op methods, so kernel and block graphs share it."""


def _declare(g: KernelGraph, cfg: Config, dtype: str, weights: Sequence[str]) -> tuple[Tensor, list[Tensor]]:
    n, d, o = cfg["n"], cfg["d"], _width(cfg)
    return g.input((n, d), dtype, "X"), [g.input((d, o), dtype, w) for w in weights]


def _width(cfg: Config) -> int:
    """The weights' output width: `o` where the config has one (a non-square projection), else d."""
    return cfg.get("o", cfg["d"])


def _graph(cfg: Config, dtype: str, *, weights: Sequence[str], norm: bool, combine: Combine) -> KernelGraph:
    g = KernelGraph()
    x, ws = _declare(g, cfg, dtype, weights)
    h = g.rms_norm(x, EPS) if norm else x
    g.output(combine(g, [g.matmul(h, w) for w in ws]))
    return g


def _fused(cfg: Config, dtype: str, *, weights: Sequence[str], norm: bool, combine: Combine,
           grid: int | None = None, loop: int | None = None) -> KernelGraph:
    """One kernel: block x owns a column tile of every weight; iteration i a row tile (X: column tile)."""
    d, o = cfg["d"], _width(cfg)
    g = KernelGraph()
    x, ws = _declare(g, cfg, dtype, weights)
    b = BlockGraph(grid=(o // default_tile(o) if grid is None else grid,),
                   loop=d // default_tile(d) if loop is None else loop)
    bx = b.input(x, imap={}, fmap=1)                                  # X tile [n, d/loop]
    bws = [b.input(w, imap={"x": 1}, fmap=0) for w in ws]             # W tile [d/loop, o/grid]
    outs = [b.accum(b.matmul(bx, bw)) for bw in bws]                  # X @ W tile [n, o/grid]
    if norm:
        ss = b.accum(b.sum(b.square(bx), 1))                          # sum(X²) [n, 1]
        r = b.sqrt(b.add_scalar(b.mul_scalar(ss, 1 / d), EPS))        # sqrt(mean(X²) + eps)
        outs = [b.div(o, r) for o in outs]
    b.output(combine(b, outs), omap={"x": 1}, shape=(cfg["n"], o))     # a ragged grid's last tile is partial
    (o,) = g.custom(b, [x, *ws])
    g.output(o)
    return g


def _scales(cfg: Config, weights: Sequence[str]) -> dict[str, float]:
    """X is O(1); weights are 1/sqrt(d) so every X @ W entry stays O(1)."""
    return {"X": 1.0, **{w: cfg["d"] ** -0.5 for w in weights}}


def _workload(name: str, program: str, configs: Sequence[Config], weights: Sequence[str], norm: bool,
              combine: Combine, reference: Callable[..., torch.Tensor], display: str,
              paper: PaperFigures | None, small: Config | None = None, medium: Config | None = None) -> Workload:
    """One workload of the family; the paper's (square weights, `small` not given) sweep its evaluation
    script's grid n ∈ {8, 16} × d ∈ {1024, 2048, 4096}."""
    family = dict(weights=tuple(weights), norm=norm, combine=combine)
    sweep = () if small else tuple({"n": n, "d": d} for n in (8, 16) for d in (1024, 2048, 4096))
    small = small or {"n": 4, "d": 64}
    return Workload(
        name=name, program=program, dims=tuple(small), real_configs=tuple(configs),
        fused_params=("grid", "loop"),
        graph_fn=partial(_graph, **family), reference_fn=reference,
        scales_fn=partial(_scales, weights=weights), fused_fn=partial(_fused, **family),
        display=display, small=small, medium=medium or {"n": 4, "d": 128}, paper=paper, sweep=sweep)


RMSNORM = _workload(
    "rmsnorm", "O = rms_norm(X) @ W", [{"n": 8, "d": 4096}, {"n": 8, "d": 1024}],
    weights=["W"], norm=True, combine=lambda g, p: p[0],
    reference=lambda x, w: rms_norm(x) @ w,
    display="RMSNorm", paper=PaperFigures(("11.6", "13.0", "0.3"), (1, 8, 9)))

RMSNORM_MLP = _workload(
    "rmsnorm_mlp", "O = (rms_norm(X) @ Wup) * (rms_norm(X) @ Wgate)",
    [{"n": 8, "d": 1024}, {"n": 16, "d": 1024}],
    weights=["Wup", "Wgate"], norm=True, combine=lambda g, p: g.mul(p[0], p[1]),
    reference=lambda x, wup, wgate: (rms_norm(x) @ wup) * (rms_norm(x) @ wgate),
    display="RMSNorm-MLP", paper=PaperFigures(("3600x", "3600x", "871"), (12, 14, 23)))

SWIGLU = _workload(
    "swiglu", "O = silu(X @ Wgate) * (X @ Wup)", [{"n": 8, "d": 1024}, {"n": 8, "d": 4096}],
    weights=["Wgate", "Wup"], norm=False, combine=lambda g, p: g.mul(g.silu(p[0]), p[1]),
    reference=lambda x, wgate, wup: F.silu(x @ wgate) * (x @ wup),
    display="SwiGLU", paper=PaperFigures(("45.6", "27.0", "1.0"), (1, 1, 12)))

RMSNORM_LINEAR = _workload(
    "rmsnorm_linear", "O = rms_norm(X) @ W, W [d, o] not square", [{"n": 2, "d": 4096, "o": 6144}],
    weights=["W"], norm=True, combine=lambda g, p: p[0],
    reference=lambda x, w: rms_norm(x) @ w,
    display="RMSNorm-linear", paper=None, small={"n": 4, "d": 64, "o": 96},
    medium={"n": 4, "d": 128, "o": 192})
