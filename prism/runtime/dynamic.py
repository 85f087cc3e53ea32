"""Programs called at many sizes: one search, one tuning per size bucket, nothing re-done inside a bucket.

A search result holds for all sizes (its graphs are verified for every parallel size), so only the tuning
and the code depend on the sizes a program is called with. A *bucket* is the set of sizes that round up to
the same powers of two, dim by dim. The first call in a bucket tunes (`superoptimize`; its search comes
from the result cache after the first bucket). A later call at other sizes of the bucket takes the bucket's
choice, the same sGraph at the same grid, loop, warps and stages, instantiated at its own sizes: no
search, no tuning. A choice that is not a valid point at the new sizes (a tile that does not divide the new
extent) is not stretched: those sizes are tuned on their own, and `tunings` counts it.

`DynamicGraph` is what `prism.superoptimize(program, dynamic=...)` returns; `SizeBuckets` is the shared
part, also used by `torch.compile(backend="prism")` for graphs whose sizes are symbolic
(prism.capture.dynamic).
"""

from __future__ import annotations

import collections
import copy
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from prism.errors import GraphError, InputError
from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES
from prism.runtime.optimized import CUDA, EXECUTION_TEXT, OptimizedGraph, execution_mode
from prism.tune.report import PER_OUTPUT, UNFUSED, Report
from prism.tune.space import GraphSpace, instantiate
from prism.tune.target import Target

__all__ = ["DynamicGraph", "SizeBuckets", "bucket", "parse_dynamic"]

Shapes = tuple[tuple[int, ...], ...]


def bucket(shapes: Sequence[Sequence[int]]) -> Shapes:
    """Every dim rounded up to a power of two: sizes in one bucket share a tuning."""
    return tuple(tuple(1 << max(0, int(n) - 1).bit_length() for n in s) for s in shapes)


@dataclass
class _Choice:
    """A bucket's tuning: the search result, the chosen point of it, and the report that chose it."""

    result: Any
    report: Report
    shapes: Shapes


class SizeBuckets:
    """OptimizedGraphs of one program at many sizes. `optimize(program)` tunes at the program's sizes and
    returns an OptimizedGraph whose `search_result` is the result it was tuned from. `tunings` counts the
    tunings per bucket."""

    def __init__(self, optimize: Callable[[KernelGraph], OptimizedGraph], device: torch.device,
                 target: Target) -> None:
        self.optimize, self.device, self.target = optimize, device, target
        self.tunings: collections.Counter[Shapes] = collections.Counter()
        self._choices: dict[Shapes, _Choice] = {}
        self._at: dict[tuple, OptimizedGraph] = {}

    def get(self, program: KernelGraph) -> OptimizedGraph:
        """The OptimizedGraph of `program` (at its sizes), tuned only if its bucket has no usable choice."""
        shapes = tuple(t.shape for t in program.inputs)
        key = (shapes, tuple(t.dtype for t in program.inputs))
        if key not in self._at:
            b = bucket(shapes)
            opt = self._reuse(self._choices.get(b), program)
            if opt is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU": said once, by the owner
                    opt = self.optimize(program)
                self.tunings[b] += 1
                best = opt.report.best
                if b not in self._choices and best is not None and best.origin != PER_OUTPUT:
                    self._choices[b] = _Choice(opt.search_result, opt.report, shapes)
            self._at[key] = opt
        return self._at[key]

    def _reuse(self, choice: _Choice | None, program: KernelGraph) -> OptimizedGraph | None:
        """The bucket's choice at `program`'s sizes, or None if it is not a valid point there."""
        if choice is None:
            return None
        c = choice.report.best.candidate  # type: ignore[union-attr]
        shapes = [t.shape for t in program.inputs]
        if c.graph == UNFUSED:
            graph = program
        else:
            dtype, names = program.inputs[0].dtype, [t.name for t in program.inputs]
            sgraph = choice.result.graphs[c.graph]
            if GraphSpace(sgraph, shapes, dtype, self.target).violations(c.grid, c.loop, c.warps, c.stages):
                return None
            graph = instantiate(sgraph, shapes, dtype, names, c)
        report = copy.deepcopy(choice.report)
        report.notes = report.notes + [f"the choice tuned at sizes {[list(s) for s in choice.shapes]} reused at "
                                       f"{[list(s) for s in shapes]} (one size bucket): no search, no tuning"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return OptimizedGraph(program, graph, report, self.device, torch_op=False)


def parse_dynamic(program: KernelGraph, dynamic: Any) -> dict[str, list[tuple[int, int]]]:
    """`dynamic` ({name: "INPUT.DIM" or a list of them}) as {name: [(input index, dim), ...]}, or an InputError.
    The dims under one name always have the same size (K's and V's key positions); each dim has one name."""
    if not isinstance(dynamic, dict):
        raise InputError('superoptimize: dynamic must be a dict of size names to input dims, e.g. '
                         '{"kv": ["K.1", "V.1"]}')
    index = {t.name: i for i, t in enumerate(program.inputs)}
    out: dict[str, list[tuple[int, int]]] = {}
    seen: dict[tuple[int, int], str] = {}
    for name, dims in dynamic.items():
        dims = [dims] if isinstance(dims, str) else dims
        if not isinstance(name, str) or not isinstance(dims, (list, tuple)) or not dims:
            raise InputError(f"superoptimize: dynamic[{name!r}] must list input dims like \"K.1\", got {dims!r}")
        for spec in dims:
            tensor, _, dim = str(spec).rpartition(".")
            if tensor not in index or not dim.lstrip("-").isdigit():
                known = ", ".join(f"{t.name}{list(t.shape)}" for t in program.inputs)
                raise InputError(f"superoptimize: dynamic dim {spec!r} is not INPUT.DIM of an input ({known})")
            i = index[tensor]
            rank = len(program.inputs[i].shape)
            if not -rank <= int(dim) < rank:
                raise InputError(f"superoptimize: dynamic dim {spec!r}: {tensor} has {rank} dims")
            at = (i, int(dim) % rank)
            if at in seen:
                raise InputError(f"superoptimize: dynamic dim {spec!r} is named twice ({seen[at]!r}, {name!r})")
            seen[at] = name
            out.setdefault(name, []).append(at)
    return out


class DynamicGraph:
    """A program's optimized form at every size of its dynamic dims: `g(*tensors)` returns its outputs (a
    list) like an OptimizedGraph, at the tensors' sizes. Sizes are read from the tensors; the dims under one
    name must agree, and every other dim must be the program's. `at(*tensors)` is the OptimizedGraph that
    serves those sizes; `tunings` counts the tunings per size bucket (module docstring)."""

    def __init__(self, program: KernelGraph, dims: dict[str, list[tuple[int, int]]], buckets: SizeBuckets) -> None:
        self.program, self.dims, self.buckets = program, dims, buckets
        self._programs: dict[Shapes, KernelGraph] = {}
        self.execution = execution_mode(buckets.device)
        if self.execution != CUDA:
            warnings.warn(f"prism: no GPU; this DynamicGraph runs {EXECUTION_TEXT[self.execution]}",
                          RuntimeWarning, stacklevel=4)  # the caller of superoptimize

    @property
    def tunings(self) -> collections.Counter[Shapes]:
        return self.buckets.tunings

    def __call__(self, *tensors: Any) -> list[torch.Tensor]:
        return self.at(*tensors).run(tensors)

    def at(self, *tensors: Any) -> OptimizedGraph:
        """The OptimizedGraph serving the sizes of `tensors` (tuned if their bucket has no choice yet)."""
        return self.buckets.get(self.resized(self._shapes(tensors)))

    def resized(self, shapes: Shapes) -> KernelGraph:
        """The program with inputs of `shapes`: the same ops, checked again by the builder."""
        if shapes not in self._programs:
            g = KernelGraph()
            try:
                args = [g.input(s, t.dtype, t.name) for s, t in zip(shapes, self.program.inputs)]
                g.output(*self.program.replay(g, args))
            except GraphError as e:
                raise InputError(f"the program does not hold at sizes {[list(s) for s in shapes]}: {e}") from None
            self._programs[shapes] = g
        return self._programs[shapes]

    def _shapes(self, tensors: Sequence[Any]) -> Shapes:
        """The input shapes `tensors` have, if they fit the program where its dims are fixed."""
        want = self.program.inputs
        if len(tensors) != len(want) or not all(isinstance(t, torch.Tensor) for t in tensors):
            names = ", ".join(t.name for t in want)
            raise InputError(f"this dynamic graph takes {len(want)} tensor(s) ({names}) by position")
        free = {at: name for name, dims in self.dims.items() for at in dims}
        sizes: dict[str, tuple[str, int]] = {}
        for i, (t, w) in enumerate(zip(tensors, want)):
            if t.dim() != len(w.shape) or t.dtype != TORCH_DTYPES[w.dtype]:
                raise InputError(f"input {w.name} should be {w.dtype} of rank {len(w.shape)}, got {t.dtype} "
                                 f"{list(t.shape)}")
            for d, n in enumerate(t.shape):
                name = free.get((i, d))
                if name is None and n != w.shape[d]:
                    raise InputError(f"input {w.name} dim {d} is {n}; it is {w.shape[d]} in the program and not "
                                     "declared dynamic")
                if name is not None and sizes.setdefault(name, (f"{w.name}.{d}", n))[1] != n:
                    first, m = sizes[name]
                    raise InputError(f"dynamic size {name!r} is {m} at {first} but {n} at {w.name}.{d}")
        return tuple(tuple(t.shape) for t in tensors)
