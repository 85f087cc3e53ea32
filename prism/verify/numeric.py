"""Random numeric testing: the second, independent soundness check behind every e-graph proof.

A candidate is run in the reference executor at two different concrete choices of its parallel sizes
(grid sizes and loop ranges that divide the dims they split, and satisfy the size constraints its proof
needs, prism.ir.sizes) and compared with the reference program on random inputs. The e-graph claims
equality for all those sizes, so any disagreement at any of them is a bug.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from prism import interp
from prism.errors import GraphError
from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph
from prism.ir.graph import parallel_sizes
from prism.ir.sizes import violations

__all__ = ["NumericVerdict", "random_test", "size_choices", "with_sizes"]

_CANDIDATE_SIZES = (2, 3, 4, 1)
"""Sizes tried for each grid dim and loop, smallest tiles first avoided: small counts keep the
executor fast at real extents, and any size > 1 exercises the maps."""


@dataclass(frozen=True)
class NumericVerdict:
    """Whether the outputs agreed at every size choice, with the evidence."""

    equal: bool
    reason: str
    max_error: float
    choices: list = field(default_factory=list)
    all_varied: bool = False
    """Every parallel size was > 1 in every choice tried: equality then says something about the maps,
    not only about a degenerate size-1 instance."""


def with_sizes(graph: KernelGraph, sizes: Sequence[tuple[tuple[int, ...], int]]) -> KernelGraph:
    """`graph` with custom op k re-instantiated at grid sizes and loop range `sizes[k]`."""
    return graph.map_blocks(lambda k, block: block.with_sizes(*sizes[k]))


def size_choices(graph: KernelGraph, count: int = 2) -> list[list[tuple[tuple[int, ...], int]]]:
    """Up to `count` valid size assignments for the custom ops, with as many sizes > 1 as possible.

    Each custom op's choices are checked alone first, then each combination as a whole graph (a later
    kernel's input shapes depend on an earlier kernel's sizes when its outputs concatenate blocks), which
    must satisfy the graph's size constraints.
    """
    per_kernel = [_block_choices(b) for b in graph.blocks]
    combos = [list(c) for c in itertools.islice(itertools.product(*per_kernel), 256)]
    combos.sort(key=lambda c: -sum(s > 1 for grid, loop in c for s in (*grid, loop)))
    valid = []
    for combo in combos:
        try:
            sized = with_sizes(graph, combo)
        except GraphError:
            continue
        if violations(graph.constraints, parallel_sizes(sized)):
            continue
        valid.append(combo)
        if len(valid) == count:
            break
    return valid


def _block_choices(block: BlockGraph) -> list[tuple[tuple[int, ...], int]]:
    # a loop that splits nothing is no parallel dim (the encoder leaves it out): it stays 1
    loops = _CANDIDATE_SIZES if any(block.nodes[i].attrs["fmap"] is not None for i in block.loaders) else (1,)
    found = []
    for sizes in itertools.product(*[_CANDIDATE_SIZES] * len(block.grid), loops):
        try:
            block.with_sizes(sizes[:-1], sizes[-1])
        except GraphError:  # sizes that do not divide, or tiles that match only at other sizes
            continue
        found.append((tuple(sizes[:-1]), sizes[-1]))
    found.sort(key=lambda gl: (-sum(s > 1 for s in (*gl[0], gl[1])), math.prod(gl[0]) * gl[1]))
    return found


def random_test(reference: KernelGraph, candidate: KernelGraph, *, seed: int = 0, choices: int = 2,
                rtol: float = 1e-7, atol: float = 1e-9) -> NumericVerdict:
    """Run both graphs in float64 on the same random inputs, the candidate at `choices` size choices."""
    if len(reference.outputs) != len(candidate.outputs):
        return NumericVerdict(False, f"{len(candidate.outputs)} output(s), expected {len(reference.outputs)}",
                              math.inf)
    inputs = _inputs(reference, seed)
    want = interp.run(reference, inputs, torch.float64)
    if not all(torch.isfinite(w).all() for w in want):
        inputs = _inputs(reference, seed, positive=True)
        want = interp.run(reference, inputs, torch.float64)
    picked = size_choices(candidate, choices)
    worst = 0.0
    for sizes in picked or [None]:
        got = interp.run(with_sizes(candidate, sizes) if sizes else candidate, inputs, torch.float64)
        for k, (g, w) in enumerate(zip(got, want)):
            if g.shape != w.shape:
                return NumericVerdict(False, f"output {k} has shape {list(g.shape)}, expected {list(w.shape)}",
                                      math.inf, picked)
            err = (g - w).abs().max().item() if g.numel() else 0.0
            worst = max(worst, err if math.isfinite(err) else math.inf)
            if not torch.allclose(g, w, rtol=rtol, atol=atol):
                return NumericVerdict(False, f"output {k} differs by up to {err:.3g} at sizes {sizes}",
                                      worst, picked)
    varied = bool(picked) and all(_varied(graph_block, sizes_k) for sizes in picked
                                  for graph_block, sizes_k in zip(candidate.blocks, sizes))
    return NumericVerdict(True, f"equal at {len(picked)} size choice(s) {picked}", worst, picked, varied)


def _varied(block: BlockGraph, sizes: tuple[tuple[int, ...], int]) -> bool:
    grid, loop = sizes
    has_loop = any(block.nodes[i].attrs["fmap"] is not None for i in block.loaders)
    return all(g > 1 for g in grid) and (loop > 1 or not has_loop)


def _inputs(graph: KernelGraph, seed: int, positive: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in graph.inputs:
        if positive:
            out.append(torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.1)
        else:
            out.append(torch.randn(t.shape, generator=gen, dtype=torch.float64) * 0.5)
    return out
