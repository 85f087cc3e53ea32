"""Kernel-level ops → one-op µGraphs, so every op of a kernel graph runs as a generated Triton kernel.

`to_custom(graph)` rewrites a kernel graph so that every node except its inputs is a custom op: each
kernel-level op becomes a small block graph (a grid over tiles of the result; a loop for reductions
and matmul's inner dim), chosen by the op's family, and goes through the same code generator as the
searched kernels. A row-wise op whose rows fit one tile is one block op over whole rows; a longer row
runs its decomposition (prism.ir.ops) with the loop walking the row, and where the decomposition combines
the row with a statistic of the whole row (rms_norm's division), a second, element-wise kernel does that.
The rewrite is itself a kernel graph, so the reference executor checks it like any other.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from prism.codegen.spec import MAX_GRID_YZ
from prism.errors import CodegenError
from prism.ir.block import BlockGraph, next_pow2
from prism.ir.builder import Ref, Tensor
from prism.ir.graph import KernelGraph
from prism.ir.kinds import LOOP, POST
from prism.ir.ops import GROUP, GROUP_SCALE, MATMUL, MAX_REDUCE, OPS, REDUCE, ROWWISE, Shape, TType

__all__ = ["to_custom", "chain_block", "elementwise_block", "ELEMENTS", "ROW"]

ELEMENTS = 4096
"""Elements (padded) per block of an elementwise or reduction kernel."""
ROW = 16384
"""Longest row a row-wise op (rms_norm) keeps in one tile; longer rows take two kernels (sum of squares,
then divide)."""
MATMUL_TILE = 64
Custom = Callable[[BlockGraph, list[Tensor], str], tuple[Tensor, ...]]
"""custom(block, kernel tensors, tag): the block graph applied to the tensors as a custom op."""


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
    if any(g > MAX_GRID_YZ for g in grid[1:]):
        raise CodegenError(f"a pass over shape {list(shape)} needs grid {grid}: more than {MAX_GRID_YZ} blocks "
                           "along y or z")
    return tiles, grid_of, grid


Step = tuple[str, dict, tuple[int, ...]]
"""One op of an element-wise chain: (op, attrs, operands), operands numbering the chain's inputs, then its steps."""


def elementwise_block(op: str | None, attrs: dict, inputs: Sequence[TType], out: TType) -> BlockGraph:
    """A µGraph applying elementwise `op` (None: a copy, e.g. a dtype cast) tile by tile over `out`."""
    return chain_block([(op, attrs, tuple(range(len(inputs))))] if op else [], inputs, out)


def chain_block(steps: Sequence[Step], inputs: Sequence[TType], out: TType) -> BlockGraph:
    """A µGraph running element-wise `steps` one after another, tile by tile over `out` (no steps: a copy of
    input 0). An input with extent 1 where `out` has more is broadcast: every block loads its one slice."""
    _, grid_of, grid = _tiling(out.shape, {})
    b = BlockGraph(grid=grid, loop=1)
    values = [b.input(t, imap={g: d for d, g in grid_of.items() if t.shape[d] == out.shape[d]}) for t in inputs]
    for op, attrs, operands in steps:
        values.append(b.apply(op, [values[k] for k in operands], attrs))
    b.output(b.accum(values[-1]), omap={g: d for d, g in grid_of.items()})
    return b


def _reduce_block(op: str, x: TType, dim: int) -> BlockGraph:
    """A reduction (sum, max) over `dim`: the loop walks `dim` in tiles, each reduced and combined across
    iterations by the op's accumulator; each block owns a tile of the other dims."""
    tile = _divisor(x.shape[dim], 1024)
    tiles, grid_of, grid = _tiling(x.shape, {dim: tile})
    b = BlockGraph(grid=grid, loop=x.shape[dim] // tile)
    t = b.input(x, imap={g: d for d, g in grid_of.items()}, fmap=dim)
    b.output(b.accum(b.apply(op, [t], {"dim": dim}), OPS[op].accumulator), omap={g: d for d, g in grid_of.items()})
    return b


def _group_block(op: str, x: TType, dim: int, size: int) -> BlockGraph:
    """A group sum or max over `dim`: the loop walks the groups, one per iteration, and the op's accumulator
    combines them (no reshape, so any group size); each block owns a tile of the other dims."""
    tiles, grid_of, grid = _tiling(x.shape, {dim: size})
    b = BlockGraph(grid=grid, loop=x.shape[dim] // size)
    t = b.input(x, imap={g: d for d, g in grid_of.items()}, fmap=dim)
    b.output(b.accum(t, OPS[op].accumulator), omap={g: d for d, g in grid_of.items()})
    return b


def _group_scale_block(x: TType, s: TType, dim: int, size: int) -> BlockGraph:
    """Each group of `dim` times its scale: every block holds whole rows of `dim` (the groups split a padded
    row evenly only for a power-of-two size, prism.codegen.render) and a tile of the other dims."""
    _, grid_of, grid = _tiling(x.shape, {dim: x.shape[dim]}, budget=max(ELEMENTS, next_pow2(x.shape[dim])))
    b = BlockGraph(grid=grid, loop=1)
    imap = {g: d for d, g in grid_of.items()}
    tx, ts = b.input(x, imap=imap), b.input(s, imap=imap)
    b.output(b.accum(b.group_scale(tx, ts, dim, size)), omap=imap)
    return b


class _RowPass:
    """The block builder a decomposition runs with when the loop walks the last dim: a reduction over it
    combines across iterations (its op's accumulator); an op that needs the whole row again after such a sum ends the
    pass, leaving it for a second kernel."""

    def __init__(self, b: BlockGraph, x: TType) -> None:
        self.b, self.x, self.last = b, x, len(x.shape) - 1

    def __call__(self, op: str, *args: Tensor, **attrs: Any) -> Tensor:
        if {self.b.phase(t.ref) for t in args} == {LOOP, POST}:
            raise _SecondPass(op, args, attrs)
        t = self.b.apply(op, list(args), attrs)
        rowsum = OPS[op].family.rule is Shape.REDUCE and attrs["dim"] == self.last
        return self.b.accum(t, OPS[op].accumulator) if rowsum and self.b.phase(t.ref) == LOOP else t

    def rank(self, t: Tensor) -> int:
        return len(t.shape)

    def inv_extent(self, t: Tensor, dim: int) -> float:
        return 1.0 / self.x.shape[dim]


class _SecondPass(Exception):
    """Op `op` combines the row (a loop tile) with a statistic of the whole row (a post-loop tile)."""

    def __init__(self, op: str, args: tuple[Tensor, ...], attrs: dict) -> None:
        self.op, self.args, self.attrs = op, args, attrs


def _row_op(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    """Row-wise op `op` over the last dim of kernel tensor x: one block over whole rows if they fit a tile,
    else its decomposition with the loop walking the row (and a second kernel if it needs the row again)."""
    (x,) = args
    last = len(x.shape) - 1
    if next_pow2(x.shape[last]) <= ROW:
        _, grid_of, grid = _tiling(x.shape, {last: x.shape[last]}, budget=max(ELEMENTS, next_pow2(x.shape[last])))
        b = BlockGraph(grid=grid, loop=1)
        t = b.input(x, imap={g: d for d, g in grid_of.items()})
        b.output(b.accum(b.apply(op, [t], attrs)), omap={g: d for d, g in grid_of.items()})
        return custom(b, [x], op)
    tile = _divisor(x.shape[last], 1024)
    _, grid_of, grid = _tiling(x.shape, {last: tile})
    b = BlockGraph(grid=grid, loop=x.shape[last] // tile)
    t = b.input(x, imap={g: d for d, g in grid_of.items()}, fmap=last)
    try:
        y = OPS[op].decompose(_RowPass(b, x.type), t, **attrs)
    except _SecondPass as second:
        (stat,) = [a for a in second.args if b.phase(a.ref) == POST]
        if any(a is not t and b.phase(a.ref) == LOOP for a in second.args):
            raise CodegenError(f"{op} over rows of {x.shape[last]}: only the row itself may meet its statistic "
                               "in a second kernel") from None
        b.output(stat, omap={g: d for d, g in grid_of.items()})
        (r,) = custom(b, [x], "rows")
        args = [x if a is t else r for a in second.args]
        block = elementwise_block(second.op, second.attrs, [a.type for a in args], res)
        return custom(block, args, f"rows_{second.op}")
    b.output(y, omap={g: d for d, g in grid_of.items()})
    return custom(b, [x], op)


def _matmul_block(a: TType, bt: TType) -> BlockGraph:
    """Tiled matmul: the loop walks K; the grid goes over the output dims (N, M, every batch dim) with the most
    tiles, at most three, x over the most; a dim left without a grid dim is whole in every block.

    By tiles, not by position: decode attention per KV head ([b, heads, 1, d] @ [b, heads, d, h]) has one M tile
    and two batch dims, and a grid of (N, M, first batch dim) left every block all the heads of a batch entry:
    tiles of 32 heads, a stack frame of 9.7 KB and 4 blocks for P @ V on an H200 (GQA k=32's unfused program,
    benchmarks/results/gpu_bench_h200_2026-11-27_d.json)."""
    r = len(a.shape)
    m, k, n = a.shape[-2], a.shape[-1], bt.shape[-1]
    tm, tk, tn = (_divisor(s, MATMUL_TILE) for s in (m, k, n))
    counts = [s // t for s, t in zip((*a.shape[:-1], n), (1,) * (r - 2) + (tm, tn))]   # tiles per output dim
    split = sorted((d for d in range(r) if counts[d] > 1), key=lambda d: (-counts[d], -d))[:3]
    grid = tuple(counts[d] for d in split) or (1,)
    if any(g > MAX_GRID_YZ for g in grid[1:]):
        raise CodegenError(f"matmul {a} @ {bt}: grid {grid} has more than {MAX_GRID_YZ} blocks along y or z")
    out = {"xyz"[i]: d for i, d in enumerate(split)}
    b = BlockGraph(grid=grid, loop=k // tk)
    ta = b.input(a, imap={g: d for g, d in out.items() if d != r - 1}, fmap=r - 1)
    tb = b.input(bt, imap={g: d for g, d in out.items() if d != r - 2}, fmap=r - 2)
    b.output(b.accum(b.matmul(ta, tb)), omap=out)
    return b


def _elementwise(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    return custom(elementwise_block(op, attrs, [a.type for a in args], res), args, op)


def _matmul(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    return custom(_matmul_block(*(a.type for a in args)), args, op)


def _reduce(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    return custom(_reduce_block(op, args[0].type, attrs["dim"]), args, op)


def _group(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    return custom(_group_block(op, args[0].type, attrs["dim"], attrs["size"]), args, op)


def _group_scale(op: str, attrs: dict, args: list[Tensor], res: TType, custom: Custom) -> tuple[Tensor, ...]:
    return custom(_group_scale_block(*(a.type for a in args), attrs["dim"], attrs["size"]), args, op)


_LOWERING = {MATMUL: _matmul, REDUCE: _reduce, MAX_REDUCE: _reduce, ROWWISE: _row_op, GROUP: _group,
             GROUP_SCALE: _group_scale}
"""How a kernel-level op of each family runs as custom ops, keyed by family; element-wise families go tile by
tile."""


def to_custom(graph: KernelGraph) -> tuple[KernelGraph, dict[int, str]]:
    """`graph` with every kernel-level op replaced by custom ops; also {new custom node: op name}. A chain of
    element-wise ops, each but the last used only by the next ones of the chain (`_chains`), is one kernel: its
    values between them stay in registers instead of a launch and a round trip through memory each."""
    graph.check()
    out = KernelGraph()
    tags: dict[int, str] = {}
    new: dict[Ref, Tensor] = {}
    chains, inner = _chains(graph)

    def custom(block: BlockGraph, args: list[Tensor], tag: str | None) -> tuple[Tensor, ...]:
        outs = out.custom(block, args)
        if tag:
            tags[outs[0].node] = tag
        return outs

    for i, node in graph.topo():
        if node.op == "input":
            t = node.outputs[0]
            new[(i, 0)] = out.input(t.shape, t.dtype, node.attrs["name"])
            continue
        if i in inner:
            continue
        if i in chains:
            outs = _chain(graph, chains[i], new, custom)
        elif node.op == "custom":
            outs = custom(node.attrs["block"], [new[r] for r in node.inputs], None)
        else:
            lowering = _LOWERING.get(OPS[node.op].family, _elementwise)
            outs = lowering(node.op, dict(node.attrs), [new[r] for r in node.inputs], node.outputs[0], custom)
        new.update(((i, k), t) for k, t in enumerate(outs))
    out.output(*(new[r] for r in graph.outputs))
    return out, tags


def _chains(graph: KernelGraph) -> tuple[dict[int, list[int]], set[int]]:
    """The element-wise chains of `graph`: {last node: its nodes in order} for chains of two ops or more, and
    the nodes run inside a later one's kernel. An element-wise op joins the kernel of the one op that uses it
    when that op is element-wise too and its value is no graph output."""
    def elementwise(node: Any) -> bool:
        return node.op in OPS and OPS[node.op].family.elementwise
    users: dict[int, set[int]] = {}
    for i, node in graph.topo():
        for r in node.inputs:
            users.setdefault(r[0], set()).add(i)
    outputs = {r[0] for r in graph.outputs}
    into = {i: next(iter(users[i])) for i, node in graph.topo() if elementwise(node) and i not in outputs
            and len(users.get(i, ())) == 1 and elementwise(graph.nodes[next(iter(users[i]))])}
    chains: dict[int, list[int]] = {}
    for i, _ in graph.topo():
        if i in into:
            last = i
            while last in into:
                last = into[last]
            chains.setdefault(last, []).append(i)
    for last, members in chains.items():
        members.append(last)
    return chains, set(into)


def _chain(graph: KernelGraph, members: list[int], new: dict[Ref, Tensor], custom: Custom) -> tuple[Tensor, ...]:
    """One kernel for the element-wise chain `members` (in order, the last one's value its output)."""
    index: dict[Ref, int] = {}
    args: list[Tensor] = []
    steps: list[Step] = []
    for i in members:
        for r in graph.nodes[i].inputs:
            if r not in index and r[0] not in members:
                index[r] = len(args)
                args.append(new[r])
    for i in members:
        node = graph.nodes[i]
        steps.append((node.op, dict(node.attrs), tuple(index[r] for r in node.inputs)))
        index[(i, 0)] = len(args) + len(steps) - 1
    block = chain_block(steps, [a.type for a in args], graph.nodes[members[-1]].outputs[0])
    return custom(block, args, "_".join(graph.nodes[i].op for i in members))
