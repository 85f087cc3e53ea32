"""Kernel-level ops → one-op µGraphs, so every op of a kernel graph runs as a generated Triton kernel.

`to_custom(graph)` rewrites a kernel graph so that every node except its inputs is a custom op: each
kernel-level op becomes a small block graph (a grid over tiles of the result; a loop for reductions
and matmul's inner dim) and goes through the same code generator as the searched kernels. The rewrite
is itself a kernel graph, so the reference executor checks it like any other.
"""

from __future__ import annotations

import math
from typing import Sequence

from prism.codegen.errors import CodegenError
from prism.codegen.layout import next_pow2
from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph, Ref, Tensor
from prism.ir.ops import OPS, TType

__all__ = ["to_custom", "elementwise_block", "ELEMENTS", "ROW"]

ELEMENTS = 4096
"""Elements (padded) per block of an elementwise or reduction kernel."""
ROW = 16384
"""Longest row rms_norm keeps in one tile; longer rows take two kernels (sum of squares, then divide)."""
MATMUL_TILE = 64


def _divisor(n: int, cap: int) -> int:
    """The largest divisor of n whose power-of-two block is at most cap (at least 1)."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0 and next_pow2(d) <= cap)


def _tiling(shape: Sequence[int], fixed: dict[int, int],
            budget: int = ELEMENTS) -> tuple[list[int], dict[int, str], tuple[int, ...]]:
    """Tiles for a pass over `shape` (dims in `fixed` get the tile given and no grid dim: a loop walks
    them, or the tile is the whole dim), and the grid over the rest.

    Returns (tile per dim, grid dim name per split data dim, grid sizes). Inner dims get the biggest
    tiles; the (at most three) dims left with several tiles get grid dims x, y, z, most tiles first.
    """
    tiles = [fixed.get(d, 1) for d in range(len(shape))]
    budget = max(1, budget // math.prod(next_pow2(t) for t in tiles))
    for d in reversed(range(len(shape))):
        if d not in fixed:
            tiles[d] = _divisor(shape[d], budget)
            budget = max(1, budget // next_pow2(tiles[d]))
    split = sorted((d for d in range(len(shape)) if d not in fixed and shape[d] > tiles[d]),
                   key=lambda d: -(shape[d] // tiles[d]))
    for d in split[3:]:                                   # at most three grid dims: the rest stay whole
        tiles[d] = shape[d]
    split = split[:3]
    grid_of = {d: "xyz"[k] for k, d in enumerate(split)}
    grid = tuple(shape[d] // tiles[d] for d in split) or (1,)
    if any(g > 65535 for g in grid[1:]):
        raise CodegenError(f"a pass over shape {list(shape)} needs grid {grid}: more than 65535 blocks "
                           "along y or z")
    return tiles, grid_of, grid


def elementwise_block(op: str | None, attrs: dict, inputs: Sequence[TType], out: TType) -> BlockGraph:
    """A µGraph applying elementwise `op` (None: a copy, e.g. a dtype cast) tile by tile over `out`."""
    _, grid_of, grid = _tiling(out.shape, {})
    b = BlockGraph(grid=grid, loop=1)
    tiles = [b.input(t, imap={g: d for d, g in grid_of.items() if t.shape[d] == out.shape[d]}) for t in inputs]
    y = b.apply(op, tiles, attrs) if op else tiles[0]
    b.output(b.accum(y), omap={g: d for d, g in grid_of.items()})
    return b


def _sum_block(x: TType, dim: int) -> BlockGraph:
    """sum over `dim`: the loop walks `dim` in tiles, each block owns a tile of the other dims."""
    tile = _divisor(x.shape[dim], 1024)
    tiles, grid_of, grid = _tiling(x.shape, {dim: tile})
    b = BlockGraph(grid=grid, loop=x.shape[dim] // tile)
    t = b.input(x, imap={g: d for d, g in grid_of.items()}, fmap=dim)
    b.output(b.accum(b.sum(t, dim)), omap={g: d for d, g in grid_of.items()})
    return b


def _rms_block(x: TType, eps: float) -> BlockGraph:
    """rms_norm with whole rows in each tile."""
    last = len(x.shape) - 1
    _, grid_of, grid = _tiling(x.shape, {last: x.shape[last]}, budget=max(ELEMENTS, next_pow2(x.shape[last])))
    b = BlockGraph(grid=grid, loop=1)
    t = b.input(x, imap={g: d for d, g in grid_of.items()})
    b.output(b.accum(b.rms_norm(t, eps)), omap={g: d for d, g in grid_of.items()})
    return b


def _rms_denominator_block(x: TType, eps: float) -> BlockGraph:
    """sqrt(mean(x²) + eps) over the last dim, for rows too long for one tile: the loop walks the row."""
    last = len(x.shape) - 1
    tile = _divisor(x.shape[last], 1024)
    _, grid_of, grid = _tiling(x.shape, {last: tile})
    b = BlockGraph(grid=grid, loop=x.shape[last] // tile)
    t = b.input(x, imap={g: d for d, g in grid_of.items()}, fmap=last)
    ss = b.accum(b.sum(b.square(t), last))
    r = b.sqrt(b.add_scalar(b.mul_scalar(ss, 1 / x.shape[last]), eps))
    b.output(r, omap={g: d for d, g in grid_of.items()})
    return b


def _matmul_block(a: TType, bt: TType) -> BlockGraph:
    """Tiled matmul: pid_x walks N, pid_y walks M, pid_z the first batch dim; the loop walks K."""
    r = len(a.shape)
    m, k, n = a.shape[-2], a.shape[-1], bt.shape[-1]
    tm, tk, tn = (_divisor(s, MATMUL_TILE) for s in (m, k, n))
    grid = (n // tn, m // tm) + ((a.shape[0],) if r >= 3 else ())
    if any(g > 65535 for g in grid[1:]):
        raise CodegenError(f"matmul {a} @ {bt}: grid {grid} has more than 65535 blocks along y or z")
    z = {"z": 0} if r >= 3 else {}
    b = BlockGraph(grid=grid, loop=k // tk)
    ta = b.input(a, imap={"y": r - 2, **z}, fmap=r - 1)
    tb = b.input(bt, imap={"x": r - 1, **z}, fmap=r - 2)
    b.output(b.accum(b.matmul(ta, tb)), omap={"x": r - 1, "y": r - 2, **z})
    return b


def to_custom(graph: KernelGraph) -> tuple[KernelGraph, dict[int, str]]:
    """`graph` with every kernel-level op replaced by custom ops; also {new custom node: op name}."""
    graph.check()
    out = KernelGraph()
    tags: dict[int, str] = {}
    new: dict[Ref, Tensor] = {}

    def custom(block: BlockGraph, args: list[Tensor], tag: str | None) -> tuple[Tensor, ...]:
        outs = out.custom(block, args)
        if tag:
            tags[outs[0].node] = tag
        return outs

    for i, node in graph.topo():
        args = [new[r] for r in node.inputs]
        if node.op == "input":
            t = node.outputs[0]
            new[(i, 0)] = out.input(t.shape, t.dtype, node.attrs["name"])
            continue
        if node.op == "custom":
            outs = custom(node.attrs["block"], args, None)
        else:
            types = [a.type for a in args]
            kind, res = OPS[node.op].kind, node.outputs[0]
            if kind == "matmul":
                outs = custom(_matmul_block(*types), args, node.op)
            elif kind == "reduce":
                outs = custom(_sum_block(types[0], node.attrs["dim"]), args, node.op)
            elif kind == "norm" and next_pow2(res.shape[-1]) <= ROW:
                outs = custom(_rms_block(types[0], node.attrs["eps"]), args, node.op)
            elif kind == "norm":
                (r,) = custom(_rms_denominator_block(types[0], node.attrs["eps"]), args, "rms")
                outs = custom(elementwise_block("div", {}, [types[0], r.type], res), [args[0], r], "rms_div")
            else:
                outs = custom(elementwise_block(node.op, dict(node.attrs), types, res), args, node.op)
        new.update(((i, k), t) for k, t in enumerate(outs))
    out.output(*(new[r] for r in graph.outputs))
    return out, tags
