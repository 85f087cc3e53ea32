"""Checking candidates: the verifier call on a size-free instance, and the numeric cross-check.

The verifier sees each candidate instantiated at the program's own shapes with every grid size and
the loop range 1 (always divisible; it reads structure and maps only). Every accepted candidate is
then run by the reference executor at two different concrete parameter choices, at small input
extents chosen so that those sizes divide, against the program rebuilt at the same extents, in
float64. A disagreement there is an unsound-axiom event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from prism.errors import MappingError
from prism.ir import KernelGraph
from prism.ir.ops import OPS
from prism.symbolic.dims import UNIT
from prism.symbolic.draft import op_dims
from prism.symbolic.mapping import Mapping
from prism.symbolic.structure import Structure, class_factor, grouped_sums, instantiate, program_classes

__all__ = ["CHECK_PARAMS", "PREFILTER_EXTENT", "NumericCheck", "Prefilter", "check_shapes_for", "cross_check",
           "rebuild", "restrictions"]

CHECK_PARAMS = (((2, 3, 4), 2, 2), ((3, 4, 2), 3, 3))
"""(grid sizes x, y, z; loop range; base tile) of the two cross-check instances: distinct sizes per
grid dim, so a mix-up between dims shows, and every tile at least 2 wide, so nothing broadcasts."""


@dataclass(frozen=True)
class NumericCheck:
    """The cross-check of one candidate: the worst relative error and the sizes it was run at."""

    ok: bool
    max_error: float
    detail: str


def rebuild(graph: KernelGraph, shapes: Sequence[Sequence[int]]) -> KernelGraph:
    """The program `graph` (inputs and registry ops) with its inputs resized to `shapes`."""
    g = KernelGraph()
    vals: dict[tuple[int, int], Any] = {}
    for ref, shape in zip(graph.input_refs, shapes):
        node = graph.nodes[ref[0]]
        vals[ref] = g.input(tuple(shape), node.outputs[0].dtype, node.attrs["name"])
    for i, node in graph.topo():
        if node.op in OPS:
            vals[(i, 0)] = g.apply(node.op, [vals[r] for r in node.inputs], dict(node.attrs))
    g.output(*[vals[r] for r in graph.outputs])
    return g


def check_shapes_for(reference: KernelGraph, st: Structure, m: Mapping, grid: Sequence[int], loop: int,
                     tile: int) -> list[tuple[int, ...]]:
    """Input shapes at which `st` under `m` with these sizes divides evenly and the program is valid:
    every class (merged with the program's own dim equalities) gets tile × lcm of its split factors (times a
    group mapping's group width, for a class it sums in groups)."""
    space = st.graph.space
    uf = program_classes(reference, space)
    for a in range(len(space)):
        uf = uf.union(a, st.graph.uf.find(a))
    dims = [st.graph.dims[o] for o in st.outputs]
    for op in st.kernel_ops:
        matched = op_dims(op.op, op.attrs, [dims[i] for i in op.inputs], uf, space)
        if matched is None:
            raise MappingError("cross-check: kernel-level ops do not match dims")
        d, uf = matched
        dims.append(d)
    need: dict[int, int] = {}
    for a in range(len(space)):
        if space.extent(a) != 1:
            f = class_factor(m, st.graph.uf.find(a), grid, loop)
            need[uf.find(a)] = math.lcm(need.get(uf.find(a), 1), f)
    for k, d in (grouped_sums(st, m) if m.group else {}).items():   # each block's tile holds whole groups
        need[uf.find(st.graph.dims[st.graph.ops[k].inputs[0]][d])] *= m.group
    return [tuple(1 if (a := space.atom(i, d)) == UNIT else tile * need[uf.find(a)] for d in range(len(s)))
            for i, s in enumerate(space.shapes)]


def _random_inputs(graph: KernelGraph, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.rand(t.shape, generator=gen, dtype=torch.float64) - 0.5) for t in graph.inputs]


def _compare(reference: KernelGraph, candidate: KernelGraph, seed: int) -> float:
    from prism import interp

    inputs = _random_inputs(reference, seed)
    want = interp.run(reference, inputs, dtype=torch.float64)
    got = interp.run(candidate, inputs, dtype=torch.float64)
    err = 0.0
    for a, b in zip(got, want):
        if a.shape != b.shape:
            return math.inf
        scale = max(1.0, float(b.abs().max()))
        err = max(err, float((a - b).abs().max()) / scale)
    return err


def cross_check(reference: KernelGraph, st: Structure, m: Mapping, names: Sequence[str] | None = None,
                tolerance: float = 1e-9, seed: int = 0) -> NumericCheck:
    """Run `st` under `m` at the two CHECK_PARAMS instances against the program at the same extents."""
    worst, details = 0.0, []
    for grid, loop, tile in CHECK_PARAMS:
        grid, loop = grid[: m.n_grid], loop if m.loop else 1
        shapes = check_shapes_for(reference, st, m, grid, loop, tile)
        ref = rebuild(reference, shapes)
        cand = instantiate(st, m, shapes, grid, loop, names=names)
        err = _compare(ref, cand, seed)
        worst = max(worst, err)
        details.append(f"grid={grid} loop={loop} shapes={shapes}: err={err:.3g}")
    return NumericCheck(worst <= tolerance, worst, "; ".join(details))


# ---- the prefilter: cheap runs that reject most wrong mappings before the e-graph ----------------

PREFILTER_EXTENT = 4
"""Every non-unit dim gets this extent in the prefilter run: the smallest that grid sizes 2 and loop range 2
divide. Small matters: the reference executor runs a block at a time, and a kernel with a block per row (a
split form's combine) has extent³ blocks at attention's shapes. Measured on every workload's small config
against an extent of 8: the same verified graphs as at 8, as many or more mappings rejected before the verifier, and
the prefilter 2-6x faster on attention and GQA."""


def restrictions(m: Mapping) -> Iterator[tuple[tuple, tuple[int, ...], int]]:
    """Each parallel dim of `m` on its own: (what it splits, grid sizes, loop range), that dim at size 2
    and every other at 1. What such a run computes depends only on the structure and the first item."""
    n = m.n_grid
    for p in range(n):
        yield ("grid", m.grid[p] if m.grid else ()), tuple(2 if q == p else 1 for q in range(n)), 1
    if m.loop:
        yield ("loop", m.loop), (1,) * n, 2


class Prefilter:
    """Rejects a mapping that disagrees with the program at a fixed small size (sound: a correct
    mapping agrees at every size). The program's output there is computed once and reused.

    Before the run at grid sizes 2 and loop range 2, the mapping is run with one parallel dim at a
    time (`restrictions`; each verdict is kept per structure and shared by every mapping that splits
    the same classes along some dim: a structure's mappings mostly combine a few of them). At sizes
    where all other dims are 1, a split by them is the whole extent and a sum over them one block or
    one iteration, so the kernel computes what the mapping restricted to that one dim computes. A
    correct mapping is correct at those sizes too, so one that fails any of them is wrong, and the
    verifier (sound) could not prove it: the prefilter rejects no mapping the search would return.
    """

    def __init__(self, reference: KernelGraph, tolerance: float = 1e-6, seed: int = 1) -> None:
        from prism import interp

        self.shapes = [tuple(1 if n == 1 else PREFILTER_EXTENT for n in t.shape) for t in reference.inputs]
        self.program = rebuild(reference, self.shapes)
        self.inputs = _random_inputs(self.program, seed)
        self.want = interp.run(self.program, self.inputs, dtype=torch.float64)
        self.tolerance = tolerance
        self.restricted: dict[tuple, bool] = {}
        """Verdicts of one-dim runs by (structure key, the mapping's variant, what the dim splits)."""

    def passes(self, st: Structure, m: Mapping, names: Sequence[str] | None = None) -> bool:
        key = (st.key(), m.variant)  # partials differ from sums across blocks for online sums (own maxima)
        for splits, grid, loop in restrictions(m):
            if (key, splits) not in self.restricted:
                self.restricted[(key, splits)] = self._agrees(st, m, grid, loop, names)
            if not self.restricted[(key, splits)]:
                return False
        return self._agrees(st, m, (2,) * m.n_grid, 2 if m.loop else 1, names)

    def _agrees(self, st: Structure, m: Mapping, grid: tuple[int, ...], loop: int,
                names: Sequence[str] | None) -> bool:
        from prism import interp

        try:
            cand = instantiate(st, m, self.shapes, grid, loop, names=names)
        except MappingError:
            return True  # cannot judge at this size: leave it to the verifier
        got = interp.run(cand, self.inputs, dtype=torch.float64)
        for a, b in zip(got, self.want):
            if a.shape != b.shape:
                return False
            err = float((a - b).abs().max()) / max(1.0, float(b.abs().max()))
            if not err <= self.tolerance:
                return False
        return True
