"""The reference executor: the ground truth of what a kernel graph, and each fused kernel in it, means.

A custom op runs block by block and loop iteration by iteration, slicing tiles exactly as the maps say
and never shortcutting through the kernel-level program, so verification and code generation can be
tested against it. Everything is computed on the CPU in float32 or float64.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import torch

from prism.errors import InputError
from prism.ir.block import LOOP, BlockGraph
from prism.ir.graph import KernelGraph, Node, Ref
from prism.ir.ops import OPS, TORCH_DTYPES

__all__ = ["run", "run_block"]

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
            values[(i, 0)] = _apply(node, [values[r] for r in node.inputs])
    return [values[r] for r in graph.outputs]


def run_block(block: BlockGraph, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run one fused kernel on full input tensors; returns its full output tensors.

    Each block walks the loop, feeding loader tiles through the loop ops and summing accumulators;
    then it runs the post-loop ops and adds its tiles into the outputs (so blocks along a grid dim an
    output leaves unmapped are summed, and mapped ones land in disjoint slices).
    """
    dtype = inputs[0].dtype
    loop_nodes = [(i, n) for i, n in block.topo() if n.op != "saver" and block.phase((i, 0)) == LOOP]
    post_nodes = [(i, n) for i, n in block.topo() if block.phase((i, 0)) != LOOP]
    outs = [torch.zeros(t.shape, dtype=dtype) for t in block.output_types]
    for coord in itertools.product(*(range(g) for g in block.grid)):
        at = dict(zip(block.grid_dims, coord))
        env: dict[Ref, torch.Tensor] = {}
        for it in range(block.loop):
            for i, node in loop_nodes:
                if node.op == "loader":
                    src = inputs[node.attrs["index"]]
                    env[(i, 0)] = src[_loader_slices(block, node, at, it)]
                else:
                    env[(i, 0)] = _apply(node, [env[r] for r in node.inputs])
            for i, node in post_nodes:
                if node.op == "accum":
                    tile = env[node.inputs[0]]
                    env[(i, 0)] = tile.clone() if it == 0 else env[(i, 0)] + tile
        for i, node in post_nodes:
            if node.op == "saver":
                tile = env[node.inputs[0]]
                outs[node.attrs["index"]][_saver_slices(node, tile.shape, at)] += tile
            elif node.op != "accum":
                env[(i, 0)] = _apply(node, [env[r] for r in node.inputs])
    return outs


def _apply(node: Node, args: list[torch.Tensor]) -> torch.Tensor:
    return OPS[node.op].torch_fn(*args, **node.attrs)


def _loader_slices(block: BlockGraph, node: Node, at: dict[str, int], it: int) -> tuple[slice, ...]:
    """The tile of block `at`, iteration `it`: a dim split by grid dim g and the loop is cut into
    grid-size chunks, and each chunk into loop-range tiles (so a block's stride is tile * loop)."""
    by_grid = {d: g for g, d in node.attrs["imap"].items()}
    fmap = node.attrs["fmap"]
    slices = []
    for d, tile in enumerate(node.outputs[0].shape):
        start = 0
        if d in by_grid:
            start += at[by_grid[d]] * tile * (block.loop if fmap == d else 1)
        if fmap == d:
            start += it * tile
        slices.append(slice(start, start + tile))
    return tuple(slices)


def _saver_slices(node: Node, tile: torch.Size, at: dict[str, int]) -> tuple[slice, ...]:
    by_dim = {d: g for g, d in node.attrs["omap"].items()}
    return tuple(slice(at[by_dim[d]] * n, (at[by_dim[d]] + 1) * n) if d in by_dim else slice(0, n)
                 for d, n in enumerate(tile))


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
