"""Programs called at many sizes: one search, one tuning and one compile per size bucket, nothing re-done inside
a bucket.

A search result holds for all sizes (its graphs are verified for every parallel size), so only the tuning
and the code depend on the sizes a program is called with. A *bucket* is the set of sizes that round up to
the same powers of two, dim by dim. The first call in a bucket tunes (`superoptimize`; its search comes
from the result cache after the first bucket), at the bucket's top sizes (each dynamic size at its power of
two: tiles tuned there are powers of two, which kernels can count at launch). A later call at other sizes of
the bucket takes the bucket's choice: no search, no tuning.

Where it can, a bucket also keeps one set of kernels for all its sizes (`_Shared`): the chosen µGraph's tiles
stay those tuned, and only the extents of the dynamic dims, the loop's trip count and the grid's blocks over
them change, which the kernels take at launch (prism.codegen.layout): a call at a new size of the bucket runs
with no new source and no compile. That holds where a dynamic dim is split by the loop alone or by a grid dim
whose blocks each write their own tiles of the output, so that every block and every iteration keeps a real
element. Elsewhere each size of the bucket gets kernels of its own, and the report says why:
  - a dim split by a grid dim whose partials a second kernel combines or whose blocks are summed (split-KV
    attention), or by a grid dim and the loop at once: at a smaller size whole blocks or iterations would be
    past the extent, and an online softmax's running max over nothing is -inf, exp(-inf - -inf) NaN. Blocks
    that know they are empty and contribute the neutral partial are future work;
  - a tail kernel (prism.codegen.tail), a group op over a dynamic dim, a mean over one (1/n is a constant of
    the kernel), or any other kernel whose code changes with the size: the bucket's kernels are generated at
    two of its sizes and must be the same code, buffers and grids (`_share`);
  - a bucket that holds one size (dynamic sizes 1 and 2).
A bucket keeps such a pick while it serves few sizes (a program called at a handful of lengths keeps the kernels
tuned fastest). Once it has compiled kernels for PER_SIZE_COMPILES of its sizes, its sizes keep changing (a decode
loop's KV length, one more each step): each new one would compile again, a second or so on a GPU against the
microseconds per call the pick may save, so the bucket takes the best candidate of its tuning whose kernels every
size shares (`_shared_runner_up`), if one is, and says so. Where none is, the bucket's choice is instantiated at
each size, the same sGraph at the same grid, loop, warps and stages. Where that is no valid point at the new sizes
(kv 513 = 27·19 splits into neither 16 nor 9 tiles of a power of two), the size takes the point of the same sGraph
the cost model ranks best among its tilings there that keep the tuned parallel sizes over the dims that did
not move, at any launch (`_moved`): no search and no tuning,
and the report says which point and its estimate there. Only a size where the sGraph has no valid tiling at all is
tuned on its own, and `tunings` counts it. `compiles` counts the kernel sets a bucket's calls run: one where they
are shared, one per size otherwise.

`DynamicGraph` is what `prism.superoptimize(program, dynamic=...)` returns; `SizeBuckets` is the shared
part, also used by `torch.compile(backend="prism")` for graphs whose sizes are symbolic
(prism.capture.dynamic).
"""

from __future__ import annotations

import collections
import copy
import io
import tokenize
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from prism.codegen.compiled import CompiledGraph
from prism.codegen.plan import Plan, plan_graph
from prism.errors import CodegenError, GraphError, InputError, MappingError
from prism.ir import KernelGraph
from prism.ir.block import GRID_DIMS, next_pow2
from prism.ir.ops import TORCH_DTYPES
from prism.runtime.optimized import CUDA, EXECUTION_TEXT, OptimizedGraph, execution_mode
from prism.tune.rank import rank_chunk
from prism.tune.report import PER_OUTPUT, UNFUSED, Report
from prism.tune.space import Candidate, GraphSpace, instantiate
from prism.tune.target import Target

__all__ = ["DynamicGraph", "PER_SIZE_COMPILES", "Recent", "SizeBuckets", "bucket", "parse_dynamic", "resize"]

Shapes = tuple[tuple[int, ...], ...]
PER_SIZE_COMPILES = 4
"""A bucket whose choice has compiled kernels for this many of its sizes has sizes that keep changing (a decode
loop's KV length): it then takes the best tuned candidate whose kernels every size shares (module docstring)."""
Dims = dict[str, list[tuple[int, int]]]
"""Dynamic dims by name: the (input index, dim) pairs that always have that size."""


def bucket(shapes: Sequence[Sequence[int]]) -> Shapes:
    """Every dim rounded up to a power of two: sizes in one bucket share a tuning."""
    return tuple(tuple(next_pow2(n) for n in s) for s in shapes)


def resize(program: KernelGraph, shapes: Shapes) -> KernelGraph:
    """`program` with inputs of `shapes`: the same ops, checked again by the builder (InputError if they do not
    hold there)."""
    g = KernelGraph()
    try:
        args = [g.input(s, t.dtype, t.name) for s, t in zip(shapes, program.inputs)]
        g.output(*program.replay(g, args))
    except GraphError as e:
        raise InputError(f"the program does not hold at sizes {[list(s) for s in shapes]}: {e}") from None
    return g


class Recent(collections.OrderedDict):
    """A dict of at most `size` entries, the least recently used dropped first: what a program keeps per size
    it was called at (a decode loop calls at a new KV length every step, so a dict of every size would grow
    without end; an entry dropped is made again, without tuning, if that size comes back)."""

    def __init__(self, size: int = 256) -> None:
        super().__init__()
        self.size = size

    def __getitem__(self, key: Any) -> Any:
        self.move_to_end(key)
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True)
class _Shared:
    """A bucket's kernels, which take its dynamic sizes at launch: their plan (at the sizes it was tuned at), and
    the tile each parallel size of the chosen µGraph ("x", "y", "z", "loop") splits a dynamic size into, by
    (size name, tile): at a size E it has cdiv(E, tile) parts."""

    plan: Plan
    tiles: dict[str, tuple[str, int]]


@dataclass
class _Choice:
    """A bucket's tuning: the search result, the chosen point of it, the report that chose it, and the kernels
    its sizes share (None: each size has its own, `why`)."""

    result: Any
    report: Report
    shapes: Shapes
    shared: _Shared | None = None
    why: str = ""
    switched: bool = False


class SizeBuckets:
    """OptimizedGraphs of one program at many sizes. `optimize(program)` tunes at the program's sizes and
    returns an OptimizedGraph whose `search_result` is the result it was tuned from; `dims` are the program's
    dynamic dims (parse_dynamic), whose sizes a bucket's shared kernels take at launch. `tunings` counts the
    tunings per bucket, `compiles` the kernel sets its calls run (module docstring)."""

    def __init__(self, optimize: Callable[[KernelGraph], OptimizedGraph], device: torch.device,
                 target: Target, dims: Dims | None = None, pdl: bool = False) -> None:
        self.optimize, self.device, self.target, self.pdl = optimize, device, target, pdl
        self.dims: Dims = dict(dims or {})
        self.tunings: collections.Counter[Shapes] = collections.Counter()
        self.compiles: collections.Counter[Shapes] = collections.Counter()
        self._choices: dict[Shapes, _Choice] = {}
        self._at: Recent = Recent()

    def get(self, program: KernelGraph) -> OptimizedGraph:
        """The OptimizedGraph of `program` (at its sizes), tuned only if its bucket has no usable choice."""
        shapes = tuple(t.shape for t in program.inputs)
        key = (shapes, tuple(t.dtype for t in program.inputs))
        if key not in self._at:
            b = bucket(shapes)
            choice = self._choices.get(b)
            opt = None
            if choice is not None and choice.shared is None and self.compiles[b] >= PER_SIZE_COMPILES \
                    and not choice.switched:
                choice.switched = True
                shared = self._shared_runner_up(choice, resize(program, choice.shapes), choice.why)
                if not isinstance(shared, str):
                    choice.shared = shared
                    self.compiles[b] += 1
            if choice is not None and choice.shared is not None:
                opt = self._serve(choice, program, _noted(choice, shapes, "served by the bucket's kernels, which take "
                                                          f"{_names(choice.shared.plan)} at launch: no compile"))
            elif choice is not None:
                opt = self._reuse(choice, program)
                if opt is not None:
                    self.compiles[b] += 1
            if opt is None:
                opt = self._tune(b, program)
            self._at[key] = opt
        return self._at[key]

    def _tune(self, b: Shapes, program: KernelGraph) -> OptimizedGraph:
        """`program` tuned. A bucket's first tuning is at its top sizes (`_top`) and becomes its choice, with the
        kernels its sizes share; `program` is then served from it (tuned at its own sizes only where the choice is
        no valid point there)."""
        first = self._choices.get(b)
        top = self._top(program) if first is None else program
        opt = self._optimize(top)
        self.tunings[b] += 1
        best = opt.report.best
        if first is not None:
            opt.report.notes.append(f"tuned again in its size bucket: the choice tuned at sizes "
                                    f"{[list(s) for s in first.shapes]} is no valid point here ({first.why})")
        if first is not None or best is None or best.origin == PER_OUTPUT:
            if top is not program:     # nothing for the bucket to share: tuned at this call's own sizes
                opt = self._optimize(program)
                self.tunings[b] += 1
            self.compiles[b] += 1
            return opt
        choice = self._choices[b] = _Choice(opt.search_result, opt.report, tuple(t.shape for t in top.inputs))
        shared = self._share(choice, top, opt.graph)
        if isinstance(shared, str):
            choice.why = shared
            opt.report.notes.append(f"each size of this bucket gets kernels of its own: {shared}")
            if top is program:
                self.compiles[b] += 1
                return opt
            served = self._reuse(choice, program)
            if served is None:
                return self._tune(b, program)
            self.compiles[b] += 1
            return served
        choice.shared = shared
        opt.report.notes.append(f"its kernels take {_names(shared.plan)} at launch: one compile serves every size of "
                                "this bucket")
        self.compiles[b] += 1
        report = opt.report if top is program else _noted(choice, [t.shape for t in program.inputs], "tuned at the "
                                                          "bucket's top sizes, served by its kernels")
        return self._serve(choice, program, report, opt.search_result)

    def _shared_runner_up(self, choice: _Choice, top: KernelGraph, why: str) -> _Shared | str:
        """Where the tuning's pick cannot share its kernels across the bucket (`why`), the best other fused
        candidate of the tuning that can, now the bucket's choice; `why` where none can. `top`: the program at the
        sizes the bucket was tuned at. A candidate that can overflow stays aside unless the pick could too
        (prism.tune.safety)."""
        report = choice.report
        pick = report.chosen
        assert pick is not None
        risky = report.entries[pick].risk is not None
        dtype, names = top.inputs[0].dtype, [t.name for t in top.inputs]
        for i in report.order():
            e = report.entries[i]
            if i == pick or not e.ok or e.candidate.graph == UNFUSED or e.origin == PER_OUTPUT \
                    or (e.risk and not risky):
                continue
            try:
                graph = instantiate(choice.result.graphs[e.candidate.graph], choice.shapes, dtype, names,
                                    e.candidate)
                shared = self._share(choice, top, graph, e.candidate)
            except (CodegenError, MappingError, InputError) as err:
                shared = str(err)
            if not isinstance(shared, str):
                report.choose(i, f"{e.label}, whose kernels every size of the bucket shares, in place of "
                                 f"{report.entries[pick].label}, whose kernels would be compiled per size ({why})")
                report.notes.append(f"the bucket takes {e.label}: its kernels serve every size; the tuning's pick "
                                    f"{report.entries[pick].label} needs kernels per size ({why})")
                return shared
        return why

    def _top(self, program: KernelGraph) -> KernelGraph:
        """`program` with each dynamic size at the top of its bucket (its power of two): tiles tuned there are
        powers of two, which the bucket's kernels can count at launch (a KV length of 513 = 27·19, tuned at its
        own size, could get tiles of 27 and kernels per size). `program` itself where it does not hold there."""
        values = self.values(program)
        shapes = [list(t.shape) for t in program.inputs]
        for name, dims in self.dims.items():
            for i, d in dims:
                shapes[i][d] = next_pow2(values[name])
        if [list(t.shape) for t in program.inputs] == shapes:
            return program
        try:
            return resize(program, tuple(map(tuple, shapes)))
        except InputError:
            return program

    def _optimize(self, program: KernelGraph) -> OptimizedGraph:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU": said once, by the owner
            return self.optimize(program)

    def _reuse(self, choice: _Choice, program: KernelGraph) -> OptimizedGraph | None:
        """The bucket's choice at `program`'s sizes with kernels of its own (its point, or `_moved`'s), or None if
        no point of its sGraph is valid there near its tiles."""
        c = choice.report.best.candidate  # type: ignore[union-attr]
        shapes = [t.shape for t in program.inputs]
        report = _noted(choice, shapes, f"no search, no tuning; kernels of its own ({choice.why})")
        point = c
        here = None if c.graph == UNFUSED else GraphSpace(choice.result.graphs[c.graph], shapes,
                                                          program.inputs[0].dtype, self.target)
        if here is not None and here.violations(c.grid, c.loop, c.warps, c.stages, c.gemv):
            moved = self._moved(choice, program, here)
            if moved is None:
                return None
            point, seconds = moved
            entry = report.best
            assert entry is not None
            entry.candidate, entry.estimate_us, entry.measured_us = point, seconds * 1e6, None
            report.notes.append(f"{c} is no valid point at these sizes: {point}, the model's best of its points "
                                f"here, estimated {seconds * 1e6:.2f} us here")
        graph = program if c.graph == UNFUSED else instantiate(choice.result.graphs[c.graph], shapes,
                                                               program.inputs[0].dtype,
                                                               [t.name for t in program.inputs], point)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return OptimizedGraph(program, graph, report, self.device, torch_op=False, pdl=self.pdl)

    def _moved(self, choice: _Choice, program: KernelGraph, here: GraphSpace) -> tuple[Candidate, float] | None:
        """Where the bucket's chosen point is not valid at `program`'s sizes (kv 513 = 27·19 splits 16 ways into
        tiles of 33, and 9 ways into equal tiles of 57, neither a power of two), the point of its sGraph the
        model ranks best at those sizes among the tilings whose parallel sizes over dims that did not move are
        the choice's, at any launch, and the model's seconds for it. Every such tiling is ranked, not only those
        whose shares of the moved dims are near the tuned ones: the nearest can be far dearer where a size's
        tile counts factor badly (kv 5000: 157 tiles of 32, a prime). None where the sGraph has no valid tiling
        there: that size is tuned on its own. `here`: its space at those sizes."""
        c = choice.report.best.candidate  # type: ignore[union-attr]
        sgraph = choice.result.graphs[c.graph]
        shapes, dtype = [t.shape for t in program.inputs], program.inputs[0].dtype
        tuned = GraphSpace(sgraph, choice.shapes, dtype, self.target)

        def kept(counts: tuple[int, ...]) -> bool:
            return all(n == n0 for v, was, n, n0 in zip(here.variables, tuned.variables, counts, (*c.grid, c.loop))
                       if v.extents == was.extents)

        tilings = [(c.graph, grid, loop, here.launches(grid, loop)) for grid, loop in here.tilings()
                   if kept((*grid, loop))]
        names = [t.name for t in program.inputs]
        ranked = [r for rows in rank_chunk({c.graph: sgraph.to_json()}, (shapes, dtype, names), self.target, tilings)
                  if not isinstance(rows, str) for r in rows]
        best = min(ranked, key=lambda r: r.order, default=None)
        return None if best is None else (best.candidate, best.seconds)

    def _serve(self, choice: _Choice, program: KernelGraph, report: Report,
               search_result: Any = None) -> OptimizedGraph:
        """The bucket's choice at `program`'s sizes, running the bucket's shared kernels at those sizes."""
        shared = choice.shared
        assert shared is not None
        compiled = CompiledGraph(program, shared.plan.at(self.values(program)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return OptimizedGraph(program, self._form(choice, program, shared.tiles), report, self.device,
                                  search_result, torch_op=False, compiled=compiled, pdl=self.pdl)

    def values(self, program: KernelGraph) -> dict[str, int]:
        """Each dynamic size's value in `program`."""
        return {name: program.inputs[i].shape[d] for name, dims in self.dims.items() for i, d in dims[:1]}

    def _form(self, choice: _Choice, program: KernelGraph, tiles: dict[str, tuple[str, int]],
              candidate: Candidate | None = None) -> KernelGraph:
        """The bucket's choice (or `candidate` of its tuning) at `program`'s sizes with the tiles it was tuned with:
        each parallel size that splits a dynamic size E into tiles of t is cdiv(E, t) (a µGraph of the chosen
        sGraph, which the reference executor runs; the kernels are the bucket's)."""
        c = candidate or choice.report.best.candidate  # type: ignore[union-attr]
        if c.graph == UNFUSED:
            return program
        values = self.values(program)

        def parts(var: str, size: int) -> int:
            return -(-values[tiles[var][0]] // tiles[var][1]) if var in tiles else size

        c = replace(c, grid=tuple(parts(g, n) for g, n in zip(GRID_DIMS, c.grid)), loop=parts("loop", c.loop))
        return instantiate(choice.result.graphs[c.graph], [t.shape for t in program.inputs], program.inputs[0].dtype,
                           [t.name for t in program.inputs], c)

    def _share(self, choice: _Choice, program: KernelGraph, graph: KernelGraph,
               candidate: Candidate | None = None) -> _Shared | str:
        """Kernels for every size of the bucket, generated at `program`'s sizes with the dynamic dims taken at
        launch, or why there are none. They are generated again at another size of the bucket (its top, or one
        less when tuned there) and must be the same code, with the buffers and grids the sizes give: so nothing
        they compute depends on a size (a mean's 1/n, a tiling). `graph`: the choice, or `candidate` of its
        tuning, at `program`'s sizes."""
        values = self.values(program)
        tops = {n: next_pow2(v) for n, v in values.items()}
        free = sorted(n for n in values if tops[n] > 2)
        if not free:
            return ("no dynamic size is declared" if not values else
                    "its dynamic sizes are 1 or 2, so the bucket holds one size")
        marks = {(i, d): n for n in free for i, d in self.dims[n]}
        tiles = _tiles(graph, marks)
        if isinstance(tiles, str):
            return tiles
        other = {**values, **{n: tops[n] if values[n] != tops[n] else tops[n] - 1 for n in free}}
        shapes = [list(t.shape) for t in program.inputs]
        for (i, d), n in marks.items():
            shapes[i][d] = other[n]
        try:
            again = resize(program, tuple(map(tuple, shapes)))
            plan = plan_graph(graph, sizes=marks, pdl=self.pdl)
            plan2 = plan_graph(self._form(choice, again, tiles, candidate), sizes=marks, pdl=self.pdl)
        except (CodegenError, MappingError, InputError) as e:
            return f"its kernels cannot take {', '.join(free)} at launch: {e}"
        there = plan.at(other)
        grids = [s.kernel.grid_at([there.buffers[j].shape for j in s.inputs + s.outputs]) for s in there.steps]
        if _code(plan.source) != _code(plan2.source) or there.buffers != plan2.buffers \
                or grids != [s.kernel.grid for s in plan2.steps]:
            return (f"its kernels at {', '.join(f'{n}={other[n]}' for n in free)} are not those at "
                    f"{', '.join(f'{n}={values[n]}' for n in free)}: something they compute depends on a size")
        return _Shared(plan, tiles)


def _tiles(graph: KernelGraph, marks: dict[tuple[int, int], str]) -> dict[str, tuple[str, int]] | str:
    """Each parallel size of `graph`'s fused kernel ("x", "y", "z", "loop") that splits an input dim of dynamic
    size (`marks`: (input index, dim) -> size name): (the size's name, its tile), or why a tile of it cannot
    serve the bucket (a tile that is not a power of two, one parallel size over two tiles). Two names under one
    parallel size are one size (K's and V's key positions, which torch.compile names apart): code generation
    refuses a parallel size over two dims that are not one tile dim, which the program makes equal."""
    out: dict[str, tuple[str, int]] = {}
    inputs = {r: i for i, r in enumerate(graph.input_refs)}
    for _, node in graph.topo():
        if node.op != "custom":
            continue
        block = node.attrs["block"]
        for i in block.loaders:
            a = block.nodes[i].attrs
            for d, tile in enumerate(block.nodes[i].outputs[0].shape):
                name = marks.get((inputs.get(node.inputs[a["index"]], -1), d))
                split = [g for g, dd in a["imap"].items() if dd == d and block.grid_size(g) > 1]
                split += ["loop"] if a["fmap"] == d and block.loop > 1 else []
                for var in split if name else []:
                    if tile & (tile - 1) or out.setdefault(var, (name, tile))[1] != tile:
                        return f"{var} splits {name} into tiles of {tile}, which cannot be counted at launch"
    return out


def _code(source: str) -> str:
    """Generated `source` without its comments (which print the sizes it was generated at)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return tokenize.untokenize((t.type, t.string) for t in tokens if t.type != tokenize.COMMENT)


def _names(plan: Plan) -> str:
    return ", ".join(sorted(plan.sizes))


def _noted(choice: _Choice, shapes: Sequence[Sequence[int]], how: str) -> Report:
    """A copy of the bucket's report, noting that its choice serves `shapes` and how."""
    report = copy.deepcopy(choice.report)
    report.notes = report.notes + [f"the choice tuned at sizes {[list(s) for s in choice.shapes]} reused at "
                                   f"{[list(s) for s in shapes]} (one size bucket): {how}"]
    return report


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
    serves those sizes; `tunings` counts the tunings per size bucket, `compiles` the kernel sets its calls run
    (module docstring)."""

    def __init__(self, program: KernelGraph, dims: dict[str, list[tuple[int, int]]], buckets: SizeBuckets) -> None:
        self.program, self.dims, self.buckets = program, dims, buckets
        self._programs: Recent = Recent()
        self.execution = execution_mode(buckets.device)
        if self.execution != CUDA:
            warnings.warn(f"prism: no GPU; this DynamicGraph runs {EXECUTION_TEXT[self.execution]}",
                          RuntimeWarning, stacklevel=4)  # the caller of superoptimize

    @property
    def device(self) -> torch.device:
        """Where its kernels run, as OptimizedGraph.device: the tensors it takes live there."""
        return self.buckets.device

    @property
    def tunings(self) -> collections.Counter[Shapes]:
        return self.buckets.tunings

    @property
    def compiles(self) -> collections.Counter[Shapes]:
        return self.buckets.compiles

    def __call__(self, *tensors: Any) -> list[torch.Tensor]:
        return self.at(*tensors).run(tensors)

    def at(self, *tensors: Any) -> OptimizedGraph:
        """The OptimizedGraph serving the sizes of `tensors` (tuned if their bucket has no choice yet)."""
        return self.buckets.get(self.resized(self._shapes(tensors)))

    def resized(self, shapes: Shapes) -> KernelGraph:
        """The program with inputs of `shapes`: the same ops, checked again by the builder."""
        if shapes not in self._programs:
            self._programs[shapes] = resize(self.program, shapes)
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
