"""The reference executor: the ground truth of what a kernel graph, and each fused kernel in it, means.

A custom op runs block by block and loop iteration by iteration, slicing tiles exactly as the maps say
and never shortcutting through the kernel-level program, so verification and code generation can be
tested against it. Everything is computed on the CPU in float32 or float64.

Where every dim a grid dim or the loop splits divides evenly (no ragged tile: prism.ir.block.split), all blocks
run at once (`_Blocks`): each value carries one leading axis per grid dim, a loader's tile of every block is one
view of its input, an op runs on every block's tiles in one torch call, and a saver concatenates and sums the
blocks' tiles as the block-by-block run adds them. It is the same computation with the blocks side by side (a sum
across blocks may round differently in the last bits); the search's numeric checks run thousands of small
kernels, where one torch call per node and iteration instead of one per block is most of their time.
`tests/interp/test_executor.py` runs both ways on every workload's kernels and compares.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from prism.errors import InputError
from prism.ir.block import BlockGraph
from prism.ir.builder import Ref
from prism.ir.graph import KernelGraph
from prism.ir.kinds import (AFTER, BEFORE, INSIDE, LOADER, MAX, SAVER, Accumulator, Compute, Kind, Loader, Online,
                             RunningMax, Saver, kind_of, rule_for)
from prism.ir.ops import OPS, TORCH, TORCH_DTYPES, OpDef, Shape, rescaling

__all__ = ["RUN", "UPDATE", "program_fn", "run", "run_block"]

_PRECISIONS = (torch.float32, torch.float64)
_WIDER = {"float16": _PRECISIONS, "bfloat16": _PRECISIONS, "float32": (torch.float64,), "float64": ()}


def run(graph: KernelGraph, inputs: Sequence[torch.Tensor], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """Run `graph` on `inputs` (one tensor per graph input, in declaration order).

    Inputs must have the declared shapes; their dtype must be the declared one or a wider float
    (CPU references are computed in float32/float64, since fp16 matmul on a CPU is very slow).
    Returns the outputs in `dtype`, on the CPU.
    """
    graph.check()
    if dtype not in _PRECISIONS:
        raise InputError(f"interp.run: dtype must be torch.float32 or torch.float64, got {dtype}")
    values: dict[Ref, torch.Tensor] = dict(zip(graph.input_refs, _check_inputs(graph, inputs, dtype)))
    for i, node in graph.topo():
        if node.op == "custom":
            outs = run_block(node.attrs["block"], [values[r] for r in node.inputs])
            values.update(((i, k), t) for k, t in enumerate(outs))
        elif node.op != "input":
            values[(i, 0)] = OPS[node.op].torch_fn(*(values[r] for r in node.inputs), **node.attrs)
    return [values[r] for r in graph.outputs]


def program_fn(graph: KernelGraph) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
    """`graph`, a program of kernel-level ops (no fused kernels), as one straight-line function of CPU tensors of
    its input shapes: computed in float32, outputs in their declared dtypes, as `run` computes them but without
    its checks. What a compiled model's custom op calls on every step (OptimizedGraph.run_op), where the
    traced graph has fixed the inputs and a check per call would cost more than the ops."""
    graph.check()
    steps = []
    for i, node in graph.topo():
        if node.op == "custom":
            raise InputError("program_fn: the graph has fused kernels; it takes a program of kernel-level ops")
        if node.op != "input":
            steps.append((i, OPS[node.op].torch_fn, list(node.inputs), dict(node.attrs)))
    inputs, outputs = graph.input_refs, graph.outputs
    dtypes = [TORCH_DTYPES[t.dtype] for t in graph.output_tensors]

    def fn(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        values = {r: t.float() for r, t in zip(inputs, tensors)}
        for i, torch_fn, args, attrs in steps:
            values[(i, 0)] = torch_fn(*(values[r] for r in args), **attrs)
        return [values[r].to(d) for r, d in zip(outputs, dtypes)]
    return fn


def run_block(block: BlockGraph, inputs: Sequence[torch.Tensor], together: bool | None = None) -> list[torch.Tensor]:
    """Run one fused kernel on full input tensors; returns its full output tensors.

    Each block runs the nodes the schedule places before the loop, then the loop's nodes and each
    accumulator's update every iteration, then the nodes after the loop: its savers add its tiles into
    the outputs (so blocks along a grid dim an output leaves unmapped are summed, and mapped ones land in
    disjoint slices). What each node does is its kind's rule in `RUN`, and an accumulator's update its rule in
    `UPDATE`; an accumulator starts each block with nothing (its first update starts from the identity).
    `together`: all blocks at once (the module docstring); None: wherever the splits are even, False: never.
    """
    sched = block.schedule()

    def steps(nodes: list[int], table: Mapping[type, Step]) -> list[tuple[int, Any, Kind, Step]]:
        """Each node with its kind and its kind's rule, looked up once for every block and iteration."""
        kinds = [(i, block.nodes[i], kind_of(block.nodes[i])) for i in nodes]
        return [(i, node, kind, rule_for(table, kind, "the reference executor")) for i, node, kind in kinds]

    before, inside, after = (steps(sched.at(p), RUN) for p in (BEFORE, INSIDE, AFTER))
    update = steps([i for i, _, kind, _ in after if isinstance(kind, Accumulator)], UPDATE)
    outs = [torch.zeros(t.shape, dtype=inputs[0].dtype) for t in block.output_types]
    if together is None:
        together = _even(block)
    b = (_Blocks if together else _Block)(block, list(inputs), outs)
    for coord in [None] if together else itertools.product(*(range(g) for g in block.grid)):
        b.at, b.env, b.carry = dict(zip(block.grid_dims, coord or ())), {i: None for i, *_ in update}, {}
        b.run(before)
        for it in range(block.loop):
            b.it = it
            b.run(inside)
            b.run(update)
        b.run(after)
    return b.outs


@dataclass
class _Block:
    """One block's run: what the rules of `RUN` and `UPDATE` read and write: the node values so far (`env`, by
    node; None for an accumulator before its first update), what a node carries from one iteration to the next
    (`carry`: a running max keeps its value under its node and its value before this iteration under
    ("before", node)), and the block's own tiles of the kernel's inputs and outputs."""

    block: BlockGraph
    inputs: list[torch.Tensor]
    outs: list[torch.Tensor]
    at: dict[str, int] = field(default_factory=dict)
    it: int = 0
    env: dict[int, torch.Tensor | None] = field(default_factory=dict)
    carry: dict = field(default_factory=dict)  # what a node keeps from one iteration to the next (a running max)

    def run(self, steps: list[tuple[int, Any, Kind, Step]]) -> None:
        for i, node, kind, step in steps:
            step(self, i, node, kind)

    def load(self, i: int, index: int, imap: Mapping[str, int], fmap: int | None) -> None:
        """Node i's value is this block's tile, this iteration, of input `index`."""
        self.env[i] = self.inputs[index][self.tile(self.block.nodes[i].outputs[0].shape, imap, fmap)]

    def store(self, src: int, index: int, omap: Mapping[str, int], once: Sequence[str]) -> None:
        """Add node src's value into this block's tile of output `index`: at the slices of src's nominal tile,
        since a ragged split leaves its value short in the block that holds the partial tile. Only the first
        block along each grid dim in `once` writes (the others computed the same tile)."""
        if any(self.at[g] for g in once):
            return
        nominal = self.block.nodes[src].outputs[0].shape
        self.outs[index][self.tile(nominal, omap, None)] += self.env[src]

    def apply(self, op: OpDef, args: list[torch.Tensor], attrs: Mapping[str, Any]) -> torch.Tensor:
        """Table op `op` on this block's tiles. A reduction over a tile with no element (one wholly past the
        extent of a dim the loop walks raggedly: prism.ir.block.split) is its identity, the value a padded lane
        takes (`OpDef.pad`), as the kernel's masked reduction gives: torch's max of nothing raises."""
        if op.family.rule is Shape.REDUCE and args[0].shape[attrs["dim"]] == 0:
            shape = [1 if d == attrs["dim"] % args[0].dim() else n for d, n in enumerate(args[0].shape)]
            return torch.full(shape, op.pad, dtype=args[0].dtype)
        return op.torch_fn(*args, **attrs)

    def tile(self, shape: Sequence[int], maps: Mapping[str, int], fmap: int | None) -> tuple[slice, ...]:
        """The slices of this block's tile, this iteration, of a tensor whose data dims the grid dims in
        `maps` split and the loop walks dim `fmap`: a dim split by grid dim g and the loop is cut into
        grid-size chunks, and each chunk into loop-range tiles (so a block's stride is tile * loop)."""
        by_grid = {d: g for g, d in maps.items()}
        slices = []
        for d, tile in enumerate(shape):
            start = 0
            if d in by_grid:
                start += self.at[by_grid[d]] * tile * (self.block.loop if fmap == d else 1)
            if fmap == d:
                start += self.it * tile
            slices.append(slice(start, start + tile))
        return tuple(slices)


TILE_DIMS: dict[Shape, tuple[str, ...]] = {Shape.SAME: (), Shape.BROADCAST: (), Shape.REDUCE: ("dim",),
                                           Shape.GROUP: ("dim",), Shape.GROUP_SCALE: ("dim",), Shape.CONTRACT: ()}
"""The attributes of an op that name a dim of its tiles, keyed by its family's shape rule: with every block at once,
that dim is one axis further in per grid dim (`_Blocks.apply`)."""


class _Blocks(_Block):
    """Every block at once (the module docstring): a value has one leading axis per grid dim, of the grid dim's size,
    or 1 where the value is the same in every block along it, then its tile's dims."""

    def apply(self, op: OpDef, args: list[torch.Tensor], attrs: Mapping[str, Any]) -> torch.Tensor:
        """The op on every block's tiles: the operands' block axes stretched to one shape first (an op's torch
        meaning sees whole tiles, as in one block: a group op reshapes its operand's), its tile dims moved in."""
        n = len(self.block.grid)
        names = TILE_DIMS[op.family.rule]
        if names:
            attrs = {**attrs, **{a: attrs[a] + n for a in names}}
        if len(args) > 1:   # each block axis is the grid dim's size or 1: the largest is the shape (no torch call)
            blocks = tuple(max(sizes) for sizes in zip(*(a.shape[:n] for a in args)))
            args = [a.expand(*blocks, *a.shape[n:]) for a in args]
        return op.torch_fn(*args, **attrs)

    def load(self, i: int, index: int, imap: Mapping[str, int], fmap: int | None) -> None:
        """Every block's tile, this iteration, of input `index`: each dim a grid dim splits seen as (blocks, tile),
        each dim the loop walks as (iterations, tile), the iteration's taken and the blocks' axes moved in front."""
        by_dim = {d: g for g, d in imap.items()}
        shape, labels = [], []
        for d, t in enumerate(self.block.nodes[i].outputs[0].shape):
            if d in by_dim:
                shape.append(self.block.grid_size(by_dim[d]))
                labels.append(by_dim[d])
            if fmap == d:
                shape.append(self.block.loop)
                labels.append("loop")
            shape.append(t)
            labels.append(d)
        x = self.inputs[index].reshape(shape)
        if fmap is not None:
            x = x.select(labels.index("loop"), self.it)
            labels.remove("loop")
        grid = self.block.grid_dims
        x = x.permute([labels.index(g) for g in grid if g in labels] + [k for k, a in enumerate(labels)
                                                                          if isinstance(a, int)])
        for k, g in enumerate(grid):
            if g not in labels:
                x = x.unsqueeze(k)
        self.env[i] = x

    def store(self, src: int, index: int, omap: Mapping[str, int], once: Sequence[str]) -> None:
        """Every block's tile of output `index`: the first block's along a dim in `once`, the sum of the blocks'
        along every other unmapped grid dim, and the blocks' tiles side by side along a mapped one."""
        grid, n = self.block.grid_dims, len(self.block.grid)
        v = self.env[src]
        v = v.expand(*self.block.grid, *v.shape[n:])
        for k, g in enumerate(grid):
            if g in once:
                v = v.narrow(k, 0, 1)
            elif g not in omap:
                v = v.sum(k, keepdim=True)
        by_dim = {d: grid.index(g) for g, d in omap.items()}
        order = [a for d in range(v.dim() - n) for a in ([by_dim[d]] if d in by_dim else []) + [n + d]]
        ones = [k for k in range(n) if k not in by_dim.values()]
        self.outs[index] += v.permute(ones + order).reshape(self.outs[index].shape)


def _even(block: BlockGraph) -> bool:
    """Whether every dim that grid dims or the loop split holds whole tiles in every block (no ragged split)."""
    for node in block.nodes:
        kind = kind_of(node)
        if kind is LOADER:
            full, tile, maps = block.input_types[node.attrs["index"]].shape, node.outputs[0].shape, node.attrs["imap"]
        elif kind is SAVER:
            full, tile, maps = node.outputs[0].shape, block.nodes[node.inputs[0][0]].outputs[0].shape, node.attrs["omap"]
        else:
            continue
        fmap = node.attrs.get("fmap")
        for d, (extent, t) in enumerate(zip(full, tile)):
            parts = math.prod(block.grid_size(g) for g, dd in maps.items() if dd == d)
            if extent != parts * t * (block.loop if fmap == d else 1):
                return False
    return True


def _check_inputs(graph: KernelGraph, inputs: Sequence[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    expected = graph.inputs
    if isinstance(inputs, torch.Tensor) or len(inputs) != len(expected):
        got = "a single tensor" if isinstance(inputs, torch.Tensor) else f"{len(inputs)}"
        raise InputError(f"interp.run: the graph has {len(expected)} input(s) "
                         f"({', '.join(t.name for t in expected)}), got {got}")
    out = []
    for t, want in zip(inputs, expected):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"interp.run: input {want.name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != want.shape:
            raise InputError(f"interp.run: input {want.name} should have shape {list(want.shape)}, "
                             f"got {list(t.shape)}")
        if t.dtype != TORCH_DTYPES[want.dtype] and t.dtype not in _WIDER[want.dtype]:
            raise InputError(f"interp.run: input {want.name} is declared {want.dtype}, got {t.dtype} "
                             "(the declared dtype or a wider float is accepted)")
        out.append(t.detach().to("cpu", dtype))
    return out


# ---- the rules: what each node kind does in a block's run -----------------------------------------

Step = Callable[[_Block, int, Any, Kind], None]
"""A kind's rule: (the block's run, the node's index, the node, its kind)."""


def _carried(value: Any, x: torch.Tensor, identity: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The (tile, carried value) for combining loop tile `x` into a value carried across iterations (None
    before the first: the identity, shaped like `x`). A tile cut short by a ragged split of a dim the loop walks
    (its last tile) is padded with the identity, which the combine ignores."""
    if value is None:
        return x, torch.full_like(x, identity)
    pad = [p for have, want in zip(reversed(x.shape), reversed(value.shape)) for p in (0, want - have)]
    return (torch.nn.functional.pad(x, pad, value=identity) if any(pad) else x), value


def _load(ex: _Block, i: int, node: Any, kind: Kind) -> None:
    ex.load(i, node.attrs["index"], node.attrs["imap"], node.attrs["fmap"])


def _op(ex: _Block, i: int, node: Any, kind: Kind) -> None:
    ex.env[i] = ex.apply(OPS[node.op], [ex.env[r[0]] for r in node.inputs], node.attrs)


def _final(ex: _Block, i: int, node: Any, kind: Kind) -> None:
    """An accumulator after the loop: its value is final as it is."""


def _running_max(ex: _Block, i: int, node: Any, kind: Kind) -> None:
    x, before = _carried(ex.carry.get(i), ex.env[node.inputs[0][0]], MAX.identity)
    ex.carry[("before", i)] = before
    ex.env[i] = ex.carry[i] = OPS[MAX.combine].torch_fn(before, x)   # a max accumulator, seen inside the loop


def _store(ex: _Block, i: int, node: Any, kind: Kind) -> None:
    ex.store(node.inputs[0][0], node.attrs["index"], node.attrs["omap"], node.attrs.get("once", ()))


def _combine(ex: _Block, i: int, node: Any, kind: Accumulator) -> None:
    """The end of an iteration: the iteration's tile combined into the value."""
    x, acc = _carried(ex.env[i], ex.env[node.inputs[0][0]], kind.identity)
    ex.env[i] = OPS[kind.combine].torch_fn(acc, x)


def _rescaled(ex: _Block, i: int, node: Any, kind: Accumulator) -> None:
    """An online sum: the value so far rescaled by how much its running max grew, then the tile added."""
    r = node.inputs[1][0]
    x, acc = _carried(ex.env[i], ex.env[node.inputs[0][0]], kind.identity)
    ex.env[i] = acc * rescaling(TORCH, ex.carry[("before", r)], ex.carry[r]) + x


RUN: dict[type, Step] = {Loader: _load, Compute: _op, Accumulator: _final, RunningMax: _running_max, Saver: _store}
"""Each kind's step where the schedule places its node."""
UPDATE: dict[type, Step] = {Accumulator: _combine, Online: _rescaled}
"""Each accumulator kind's update at the end of every iteration."""
