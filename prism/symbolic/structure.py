"""A finished sGraph (block graph, saved tensors, kernel-level ops) and its concrete instantiation.

`instantiate(structure, mapping, shapes, grid, loop)` makes the concrete µGraph a tuner or code
generator runs: a KernelGraph with the program's inputs, one custom op (this block graph, with the
maps the mapping implies) and the kernel-level ops after it. Sizes enter only here: a mapping is
correct for all of them, so any grid/loop sizes that divide the tiles give the same function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from prism.codegen.spec import MAX_GRID_YZ
from prism.errors import MappingError
from prism.ir import BlockGraph, KernelGraph, Launch
from prism.ir.block import GRID_DIMS
from prism.ir.kinds import ACCUMULATORS, MAX, ONLINE, SUM
from prism.ir.ops import OPS, rescaling
from prism.ir.sizes import loop_size_name
from prism.symbolic.dims import UNIT, AtomSpace, InvExtent, UnionFind
from prism.symbolic.draft import LOAD_OP, RUNNING_MAX_OP, BOp, Draft, attr_from_json, attr_json, op_dims
from prism.symbolic.mapping import Mapping, MappingProblem

__all__ = ["GROUP", "Structure", "check_shapes", "class_factor", "group_variant", "grouped_sums", "instantiate",
           "later_sizes", "program_classes", "structure_from_json", "tail_rows", "tail_variant", "walk_variant",
           "walked"]


@dataclass(frozen=True)
class Structure:
    """An emitted sGraph: the block graph, the tensors it saves, and the kernel-level ops after it.

    Kernel op inputs index the kernel values: the saved outputs 0..m-1, then the kernel ops in order;
    the program's output is the last value, or, for a program with several outputs (a joint form,
    prism.search.joint), the values `results` names, in the program's output order. In the ablation modes
    `omaps` fixes each output's grid row (data dim or None per grid dim) and `sizes` the (grid sizes, loop
    range) it was generated for; `graph.labels` holds the concrete imap/fmap choices.
    """

    graph: Draft
    outputs: tuple[int, ...]
    kernel_ops: tuple[BOp, ...] = ()
    omaps: tuple[tuple[int | None, ...], ...] | None = None
    sizes: tuple[tuple[int, ...], int] | None = None
    results: tuple[int, ...] = ()

    @property
    def values(self) -> tuple[int, ...]:
        """The kernel values that are the program's outputs, in its output order."""
        return self.results or (len(self.outputs) + len(self.kernel_ops) - 1,)

    def key(self) -> tuple:
        """A canonical sort key (op lists, outputs, kernel ops; then the ablation-mode choices)."""
        return self._key

    def problem(self) -> MappingProblem:
        """What mapping instantiation needs: loader dims, saved tensors' dims, the classes."""
        return self._problem

    # Both are asked for once per mapping of the structure (tens of thousands in QK-Attention's search), so
    # each is made once (a structure is immutable).
    @cached_property
    def _key(self) -> tuple:
        return (len(self.graph.ops), tuple(o.key() for o in self.graph.ops), self.outputs,
                tuple(o.key() for o in self.kernel_ops), repr(self.omaps), repr(self.sizes), self.results)

    @cached_property
    def _problem(self) -> MappingProblem:
        g = self.graph
        return MappingProblem(tuple(g.space.input_dims(i) for i in range(g.n_loaders)),
                              tuple(g.dims[o] for o in self.outputs), g.uf, g.invariant,
                              tuple(_cone(g, o) for o in self.outputs))

    def to_json(self) -> dict[str, Any]:
        return {"shapes": [list(s) for s in self.graph.space.shapes],
                "ops": [[o.op, list(o.inputs), [attr_json(a) for a in o.attrs]]
                        for o in self.graph.ops[self.graph.n_loaders:]],
                "outputs": list(self.outputs),
                "kernel_ops": [[o.op, list(o.inputs), [attr_json(a) for a in o.attrs]] for o in self.kernel_ops]} | \
            ({"results": list(self.results)} if self.results else {})


def _cone(g: Draft, t: int) -> frozenset[int]:
    """The loaders (by input index) tensor t of `g` is computed from."""
    seen, stack, out = set(), [t], set()
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        op = g.ops[k]
        if op.op == LOAD_OP:
            out.add(op.attrs[0])
        stack.extend(op.inputs)
    return frozenset(out)


def structure_from_json(data: dict[str, Any]) -> Structure:
    """Rebuild a Structure by replaying its ops (so dims, classes and terms are recomputed)."""
    g = Draft.start(AtomSpace(tuple(tuple(s) for s in data["shapes"])))
    for op, ins, attrs in data["ops"]:
        nxt = g.extend(BOp(op, tuple(ins), tuple(attr_from_json(a) for a in attrs)))
        if isinstance(nxt, str):
            raise MappingError(f"saved structure does not replay: op {op}{tuple(ins)} fails ({nxt})")
        g = nxt
    kops = tuple(BOp(op, tuple(ins), tuple(attr_from_json(a) for a in attrs))
                 for op, ins, attrs in data["kernel_ops"])
    return Structure(g, tuple(data["outputs"]), kops, results=tuple(data.get("results", ())))


def _resolve(attrs: tuple, opname: str, shapes: Sequence[Sequence[int]]) -> dict[str, Any]:
    values = [a.value(shapes) if isinstance(a, InvExtent) else a for a in attrs]
    return dict(zip(OPS[opname].attrs, values))


def check_shapes(st: Structure, shapes: Sequence[Sequence[int]]) -> dict[int, int]:
    """Each class's extent at input `shapes`; MappingError unless they keep the structure's ranks, UNIT dims
    and class equalities."""
    space = st.graph.space
    if len(shapes) != len(space.shapes) or any(len(a) != len(b) for a, b in zip(shapes, space.shapes)):
        raise MappingError(f"instantiate: input shapes {list(map(list, shapes))} do not have the ranks of "
                           f"{list(map(list, space.shapes))}")
    extent: dict[int, int] = {}
    for i, shape in enumerate(shapes):
        for d, size in enumerate(shape):
            a = space.atom(i, d)
            if a == UNIT:
                if size != 1:
                    raise MappingError(f"instantiate: dim {d} of input {i} was 1 when searched (a broadcast "
                                       f"dim); got {size}")
                continue
            c = st.graph.uf.find(a)
            if extent.setdefault(c, size) != size:
                raise MappingError(f"instantiate: dim {d} of input {i} must equal the dims it is matched with "
                                   f"({extent[c]}), got {size}")
    return extent


def instantiate(st: Structure, m: Mapping, shapes: Sequence[Sequence[int]] | None = None,
                grid: Sequence[int] | None = None, loop: int = 1, dtype: str = "float16",
                names: Sequence[str] | None = None) -> KernelGraph:
    """The concrete µGraph of `st` under mapping `m` at input `shapes` with the given grid/loop sizes.

    `grid` has one size per grid dim of `m` (default all 1). Tiles that do not divide raise the
    IR's MappingError. A mapping whose loop splits nothing has no loop: its range must be 1 (the
    accumulators are then identities; this is how the verifier reads such a kernel).
    A partials form's second kernel has sizes that follow from the first kernel's grid alone, never its loop
    (the loop splits no dim an output keeps, so what the first kernel saves is the same at every loop range):
    the tuner's space reads them once per grid (prism.tune.space).
    """
    space = st.graph.space
    shapes = [tuple(s) for s in (space.shapes if shapes is None else shapes)]
    extent = check_shapes(st, shapes)
    if not m.loop and loop != 1:
        raise MappingError(f"instantiate: this graph has no loop (the loop splits no dim), so its range is 1, "
                           f"got {loop}")
    if m.partials and st.results:
        raise MappingError("instantiate: a joint form (several program outputs) keeps no partials")
    if m.tail and not m.partials:
        raise MappingError("instantiate: a tail mapping runs a partials form's second kernel in its first; this "
                           "one keeps no partials (Mapping.tail needs Mapping.partials)")
    grid = tuple(grid) if grid is not None else (1,) * m.n_grid
    if len(grid) != m.n_grid:
        raise MappingError(f"instantiate: this graph has {m.n_grid} grid dim(s), got grid sizes {grid}")
    names = list(names) if names is not None else [f"in{i}" for i in range(len(shapes))]
    problem = st.problem()
    loaders, omaps = problem.maps(m)
    once = problem.once(m)
    folds = problem.partials(m) if m.partials else [{} for _ in omaps]
    if folds is None:
        raise MappingError("instantiate: an output has no free dim to keep its partials along")
    maxima = _maxima(st, problem, m, omaps, folds)
    grouped = grouped_sums(st, m) if m.group else {}
    if m.group and not grouped:
        raise MappingError("instantiate: a group mapping needs a kept sum to group (grouped_sums)")
    g = KernelGraph()
    ins = [g.input(s, dtype, n) for s, n in zip(shapes, names)]
    b = BlockGraph(grid=grid, loop=loop)
    ts = []
    for k, op in enumerate(st.graph.ops):
        if k in grouped:   # the tile summed in groups of m.group columns: the second kernel sums the rest
            x, d = ts[op.inputs[0]], grouped[k]
            if x.shape[d] % m.group:
                raise MappingError(f"instantiate: a tile of {x.shape[d]} along dim {d} does not hold whole groups "
                                   f"of {m.group} (the group mapping's sums)")
            ts.append(b.apply(OPS[op.op].grouped, [x], {"dim": d, "size": m.group}))
        elif op.op == LOAD_OP:
            imap, fmap = loaders[op.attrs[0]]
            ts.append(b.input(ins[op.attrs[0]], imap=imap, fmap=fmap))
        elif op.op in ACCUMULATORS:
            ts.append(b.accum(ts[op.inputs[0]], op.op, *(ts[i] for i in op.inputs[1:])))
        elif op.op == RUNNING_MAX_OP:
            ts.append(b.running_max(ts[op.inputs[0]]))
        else:
            ts.append(b.apply(op.op, [ts[i] for i in op.inputs], _resolve(op.attrs, op.op, shapes)))
    def save(t: int, omap: dict[str, int], fold: dict[str, int], kind: str | None = None,
             written_once: tuple[str, ...] = ()) -> None:
        """Save op t's value (`kind`: through an accumulator of that kind first), blocks along `fold` side by
        side: a class dim has its extent (less than tile × blocks where a ragged split leaves the last tile
        partial), a unit or folded dim its tile times the blocks along it."""
        tile, omap = ts[t].shape, {**omap, **fold}
        shape = [extent[st.graph.uf.find(a)] if a != UNIT and d not in fold.values() else
                 tile[d] * math.prod(b.grid_size(p) for p, d2 in omap.items() if d2 == d)
                 for d, a in enumerate(st.graph.dims[t])]
        b.output(b.accum(ts[t], kind) if kind else ts[t], omap=omap, shape=shape, once=written_once)

    for k, o in enumerate(st.outputs):
        save(o, omaps[k], folds[k], written_once=once[k])
    for operand, omap in maxima.values():   # each split's maximum, beside the sums it scales
        save(operand, omap, {}, MAX.name)
    values = list(g.custom(b, ins))
    groups = [{d: (values[k].shape[d] // b.grid_size(p), 1 if st.graph.dims[o][d] == UNIT else
                   extent[st.graph.uf.find(st.graph.dims[o][d])]) for p, d in fold.items()}
              for k, (o, fold) in enumerate(zip(st.outputs, folds))]
    if any(groups):
        saved_max = dict(zip(maxima, values[len(st.outputs):]))
        scaled = [saved_max.get(_running(st, o)) if gr else None for o, gr in zip(st.outputs, groups)]
        rows = None
        if m.tail:
            rows = {d: b.grid_size(p) for p, d in tail_rows(st, m).items()}
            if not rows:
                raise MappingError("instantiate: a tail mapping whose first kernel has no grid dim that maps the "
                                   "same data dim in all it saves (tail_rows)")
        walk = b.grid_size(walked(st, m)) if m.walk else None
        g.output(_fold(g, values[:len(st.outputs)], groups, scaled, st.kernel_ops, shapes, rows, walk))
        return g
    for op in st.kernel_ops:
        values.append(g.apply(op.op, [values[i] for i in op.inputs], _resolve(op.attrs, op.op, shapes)))
    g.output(*(values[v] for v in st.values))
    return g


def walked(st: Structure, m: Mapping) -> str | None:
    """The grid dim of the first kernel whose splits a walk mapping's second kernel walks, one per iteration (its
    loop range is that dim's size); None for any other mapping."""
    return next(iter(st.problem().partials(m)[0])) if m.walk else None


def later_sizes(st: Structure, m: Mapping, grid: Sequence[int]) -> dict[str, int]:
    """The parallel sizes of the later kernels that follow from the first kernel's `grid` through the mapping alone,
    as `instantiate` makes them: a partials form's second kernel loops over the walked splits (a walk mapping) or
    once. Its grid follows from the saved shapes too; only an instantiation gives those (prism.tune.space)."""
    if not m.partials:
        return {}
    split = walked(st, m)
    return {loop_size_name(1): grid[GRID_DIMS.index(split)] if split is not None else 1}


def _running(st: Structure, o: int) -> int | None:
    """The running max that saved tensor `o` is an online accumulator of (its op index), or None."""
    op = st.graph.ops[o]
    return op.inputs[1] if op.op == ONLINE.name else None


def _maxima(st: Structure, problem: MappingProblem, m: Mapping, omaps: list[dict[str, int]],
            folds: list[dict[str, int]]) -> dict[int, tuple[int, dict[str, int]]]:
    """For each running max whose online sums are kept as partials: {running max: (its operand, omap)}. Each
    split's sums were scaled by exp(-m_split), its own maximum, so kernel 2 needs every m_split: kernel 1
    saves its final value (a max accumulator of the same operand) side by side like the sums, one per group.
    MappingError where the maxima cannot line up with the sums (kernel 2 scales group k of the sums by
    exp(m_k - max_k m_k) element by element)."""
    out: dict[int, tuple[int, dict[str, int]]] = {}
    for k, o in enumerate(st.outputs):
        r = _running(st, o)
        if r is None or not folds[k]:
            continue
        if len(folds[k]) != 1:
            raise MappingError("instantiate: online sums kept as partials over more than one grid dim")
        operand = st.graph.ops[r].inputs[0]
        dims = st.graph.dims[operand]
        extra = MappingProblem(problem.loaders, problem.outputs + (dims,), problem.uf, problem.invariant)
        omap = extra.maps(m)[1][-1]
        (p, d), out_dims = next(iter(folds[k].items())), problem.outputs[k]
        saved = {**omap, p: d}
        lined_up = len(dims) == len(out_dims) and dims[d] == UNIT and all(
            a == b or UNIT not in (a, b) and problem.cls(a) == problem.cls(b)
            for j, (a, b) in enumerate(zip(dims, out_dims)) if j != d)
        if not lined_up or omap != omaps[k] or out.get(r, (operand, saved))[1] != saved:
            raise MappingError(f"instantiate: the maxima of running max {r} ({len(dims)} dims) do not line up with "
                               f"the partial sums of output {k} along dim {d}")
        out[r] = (operand, saved)
    return out


def tail_rows(st: Structure, m: Mapping) -> dict[str, int]:
    """{grid dim of kernel 1: data dim} for a partials mapping's second kernel run as the first's tail: each grid
    dim that maps the same data dim in every output the first saves, a dim the second keeps (not the last,
    not one it sums groups along). Then a block of the second per row of the first reads exactly what that
    row wrote. Empty when there is none, or when kernel-level ops after the sums are not element-wise (the
    second kernel then holds whole tensors)."""
    problem = st.problem()
    folds = problem.partials(m) if m.partials else None
    ranks = {len(st.graph.dims[o]) for o in st.outputs}
    if not folds or len(ranks) != 1 or not all(OPS[op.op].family.elementwise for op in st.kernel_ops):
        return {}
    _, omaps = problem.maps(m)
    last, folded = ranks.pop() - 1, {d for fold in folds for d in fold.values()}
    return {p: d for p, d in omaps[0].items()
            if d < last and d not in folded and all(om.get(p) == d for om in omaps)}


def tail_variant(st: Structure, m: Mapping) -> Mapping | None:
    """`m` (a partials mapping) with its second kernel run as the tail of its first; None where `tail_rows`
    finds no row to pair the kernels by."""
    if not _plain(m) or not tail_rows(st, m):
        return None
    return Mapping(m.grid, m.loop, partials=True, tail=True)


GROUP = 16
"""The group width of a group mapping's first kernel (class B): the narrowest tile Triton's dot takes
(prism.codegen.layout.MIN_DOT), so a tile of a dim that also feeds a dot holds whole groups."""


def grouped_sums(st: Structure, m: Mapping) -> dict[int, int]:
    """{op: data dim} of the reductions a group mapping sums in groups: for each output kept as partials along one
    data dim d, the reduction over d (one with a group form, OpDef.grouped) whose value it saves, directly or
    through a sum accumulator that is its only consumer. Not an online sum's: each split's sums are rescaled by
    the second kernel's group ops over the splits, and under a group count (prism.verify.size_constraints.Count) the
    verifier knows a split's width only as a quotient of sizes, not as the groups a grid dim concatenated."""
    folds = st.problem().partials(m) if m.partials else None
    out: dict[int, int] = {}
    for o, fold in zip(st.outputs, folds or ()):
        if len(fold) != 1:
            continue
        (d,), op = fold.values(), st.graph.ops[o]
        r = op.inputs[0] if op.op == SUM.name else o
        red = st.graph.ops[r]
        if r != o and st.graph.uses[r] != 1:
            continue
        if red.op in OPS and OPS[red.op].grouped and tuple(red.attrs) == (d,) \
                and st.graph.dims[red.inputs[0]][d] != UNIT:
            out[r] = d
    return out


def _plain(m: Mapping) -> bool:
    """A partials mapping with no other variant: the one the walk and group variants are made from."""
    return m.partials and not (m.tail or m.walk or m.group)


def group_variant(st: Structure, m: Mapping) -> Mapping | None:
    """`m` (a partials mapping) with its kept sums summed in groups of GROUP columns by the first kernel (class B;
    right where each tile holds whole groups); None where it keeps no such sum (`grouped_sums`)."""
    return Mapping(m.grid, m.loop, partials=True, group=GROUP) if _plain(m) and grouped_sums(st, m) else None


def walk_variant(st: Structure, m: Mapping) -> Mapping | None:
    """`m` (a partials mapping) with its second kernel's loop walking the splits (class D; its loop range is the
    split count); None where the outputs are not all kept along one grid dim, or kernel-level ops after the sums
    are not element-wise (the second kernel then holds whole tensors), or some are online sums: each split is
    scaled by its own maximum, so the loop would rescale them by a running max of the splits' maxima into online
    accumulators, a form the verifier's axioms do not prove yet (a hand-built one saturated its e-graph)."""
    folds = st.problem().partials(m) if _plain(m) else None
    if not folds or len({tuple(f) for f in folds}) != 1 or len(folds[0]) != 1 or \
            any(_running(st, o) is not None for o in st.outputs) or \
            not all(OPS[op.op].family.elementwise for op in st.kernel_ops):
        return None
    return Mapping(m.grid, m.loop, partials=True, walk=True)


def _fold(g: KernelGraph, saved: list[Any], groups: list[dict[int, tuple[int, int]]], scaled: list[Any],
          kernel_ops: Sequence[BOp], shapes: Sequence[Sequence[int]], rows: dict[int, int] | None = None,
          walk: int | None = None) -> Any:
    """Kernel 2 of a partials form, one custom op: every block loads whole rows of the saved partials, sums
    them in groups (`groups[k]`: data dim -> (the width one split saved, the program's width) of saved tensor k:
    groups of the first, then summed whole where the program's width is 1 and a split saved more), then runs the
    kernel-level ops.
    Online sums (`scaled[k]`: the saved maxima of their splits, else None) were each scaled by exp(-m) for
    their split's own max m, so each group is first rescaled to the largest: by exp(m_split - max m), at
    most 1 (FlashDecoding's combine; group_max and group_scale).
    Its grid splits, one block per index, every dim but the last (up to three) that all saved tensors share
    with the same extent, that none sums groups along, and that element-wise kernel ops keep: the partials
    are small, and one block per batch row left most of the GPU idle (10.9 µs for attention's, against
    1.2 µs for the atomic form's division on an H100: `benchmarks/split_kv_partials.py --kernels`).
    With `rows` ({data dim: blocks}, a tail mapping's `tail_rows` at kernel 1's sizes), kernel 2 has kernel 1's
    blocks along those dims instead, and its launch says `tail`: the last block of each row of kernel 1 runs
    it (prism.codegen.tail).
    With `walk` (a walk mapping's split count), its loop walks the splits instead, one per iteration, and
    its accumulators sum them: no group ops (the first kernel saved each split's tile at the program's width)."""
    rank, shape = len(saved[0].shape), saved[0].shape
    elementwise = all(OPS[op.op].family.elementwise for op in kernel_ops)
    tensors = saved + [t for t in scaled if t is not None]
    folded = groups + [gr for gr, t in zip(groups, scaled) if t is not None]
    if rows is None:
        dims = [d for d in range(rank - 1) if elementwise and shape[d] > 1 and all(
            len(t.shape) == rank and t.shape[d] == shape[d] and d not in gr for t, gr in zip(tensors, folded))]
        dims = sorted(dims, key=lambda d: -shape[d])[:len(GRID_DIMS)]
        dims = [d for k, d in enumerate(dims) if k == 0 or shape[d] <= MAX_GRID_YZ]
        sizes = [shape[d] for d in dims]
    else:
        dims, sizes = list(rows), list(rows.values())
    k2 = BlockGraph(grid=tuple(sizes) or (1,), loop=walk or 1, launch=Launch(tail=rows is not None))
    imap = {GRID_DIMS[k]: d for k, d in enumerate(dims)}
    inputs, loaded, scales = [], {}, {}
    for t, gr in zip(tensors, folded):
        if id(t) not in loaded:
            inputs.append(t)
            loaded[id(t)] = k2.accum(k2.input(t, imap=imap, fmap=None if walk is None else next(iter(gr))))
    tiles = []
    for t, gr, mx in zip(saved, groups, scaled):
        tile = loaded[id(t)]
        for d, (size, width) in gr.items():
            if walk is not None:
                continue
            if mx is not None:
                if id(mx) not in scales:   # exp(m_split - max m_split): at most 1
                    m_split = loaded[id(mx)]
                    scales[id(mx)] = rescaling(k2, m_split, k2.group_max(m_split, d, 1))
                tile = k2.group_scale(tile, scales[id(mx)], d, size)
            # a group mapping's sum: each split saved `size` group sums of the program's one, all summed at once
            tile = k2.group_sum(tile, d, size) if width == size else k2.sum(tile, d)
        tiles.append(tile)
    for op in kernel_ops:
        tiles.append(k2.apply(op.op, [tiles[i] for i in op.inputs], _resolve(op.attrs, op.op, shapes)))
    out_shape = [shape[d] if d in imap.values() else n for d, n in enumerate(tiles[-1].shape)]
    k2.output(tiles[-1], omap=imap, shape=out_shape)   # a row dim split raggedly keeps its extent
    (out,) = g.custom(k2, inputs)
    return out


def program_classes(graph: KernelGraph, space: AtomSpace) -> UnionFind:
    """The dim equalities a KernelGraph of registry ops imposes on its inputs' atoms."""
    uf = UnionFind.identity(len(space))
    dims: dict[tuple[int, int], tuple[int, ...]] = {}
    for k, ref in enumerate(graph.input_refs):
        dims[ref] = space.input_dims(k)
    for i, node in graph.topo():
        if node.op in OPS:
            attrs = tuple(node.attrs[a] for a in OPS[node.op].attrs)
            matched = op_dims(node.op, attrs, [dims[r] for r in node.inputs], uf, space)
            if matched is None:
                raise MappingError(f"program_classes: {node.op} does not match dims")
            dims[(i, 0)], uf = matched
    return uf


def class_factor(m: Mapping, cls: int, grid: Sequence[int], loop: int) -> int:
    """How many tiles class `cls` is cut into: its grid dim's size times the loop if it splits it."""
    p = m.grid_of(cls)
    return (grid[p] if p is not None else 1) * (loop if cls in m.loop else 1)

