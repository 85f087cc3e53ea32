"""nTrans: the normalized transformer's residual update (nGPT), O = rms_norm(X + alpha * (rms_norm(H) - X)).

X is the residual stream, H the output of an attention or MLP block, alpha the per-entry step size (all
[n, d]): the residual moves a step from X towards the normalized block output and is normalized again.
nGPT normalizes with the L2 norm; rms_norm is the same up to a factor sqrt(d) that alpha absorbs, as in
Mirage's benchmark of it. Everything is element-wise but the two row norms, so the fused kernel is a
block per row with the whole row in its tile; there is no loop and no matmul.
"""

from __future__ import annotations

import torch

from prism.ir import BlockGraph, KernelGraph, Tensor
from prism.ir.builder import GraphBuilder
from prism.workloads.base import EPS, Config, Workload, rms_norm

__all__ = ["NTRANS"]


def _declare(g: KernelGraph, cfg: Config, dtype: str) -> tuple[Tensor, Tensor, Tensor]:
    shape = (cfg["n"], cfg["d"])
    return g.input(shape, dtype, "H"), g.input(shape, dtype, "X"), g.input(shape, dtype, "alpha")


def _update(g: GraphBuilder, h: Tensor, x: Tensor, alpha: Tensor) -> Tensor:
    """X + alpha * (rms_norm(H) - X), written over graph op methods (kernel and block graphs share it)."""
    return g.add(x, g.mul(alpha, g.sub(g.rms_norm(h, EPS), x)))


def _graph(cfg: Config, dtype: str) -> KernelGraph:
    g = KernelGraph()
    g.output(g.rms_norm(_update(g, *_declare(g, cfg, dtype)), EPS))
    return g


def _fused(cfg: Config, dtype: str, *, grid: int | None = None) -> KernelGraph:
    """One kernel, one loop iteration: block x owns n/grid whole rows of every input (default: one row)."""
    g = KernelGraph()
    ins = _declare(g, cfg, dtype)
    b = BlockGraph(grid=(cfg["n"] if grid is None else grid,), loop=1)
    u = _update(b, *(b.input(t, imap={"x": 0}) for t in ins))         # [n/grid, d]
    b.output(b.rms_norm(b.accum(u), EPS), omap={"x": 0}, shape=(cfg["n"], cfg["d"]))  # savers take post-loop tensors
    (o,) = g.custom(b, list(ins))
    g.output(o)
    return g


def _scales(cfg: Config) -> dict[str, float]:
    """H and X are O(1); alpha is a small step, as nGPT's learned ones are."""
    return {"H": 1.0, "X": 1.0, "alpha": 0.1}


def _reference(h: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    return rms_norm(x + alpha * (rms_norm(h) - x))


NTRANS = Workload(
    name="ntrans", program="O = rms_norm(X + alpha * (rms_norm(H) - X))", dims=("n", "d"),
    real_configs=({"n": 8, "d": 4096}, {"n": 64, "d": 4096}), fused_params=("grid",),
    graph_fn=_graph, reference_fn=_reference, scales_fn=_scales, fused_fn=_fused,
    display="nTrans", small={"n": 4, "d": 64}, medium={"n": 4, "d": 128})
