"""Mapping instantiation: every assignment of the m[T,d,p] that satisfies eq. 1–2 and dim matching (§3.4).

Dimension matching makes the m's of all atoms in one class equal, so a mapping is a choice, per
grid dim, of the classes it partitions, plus the set of classes the loop partitions:
  * eq. 1 (per tensor T and parallel dim p, at most one dim of T split by p): classes sharing a
    loader or an output never share a grid dim; classes sharing a loader are not both in the loop;
    a class holding two dims of one loader (or output) is never partitioned;
  * eq. 2 (a dim is split by at most one grid dim): the grid dims' class sets are disjoint;
  * output shapes must equal the program's for all d_p, which fixes the omap (grid dim p combs the
    output dim whose class it partitions, and sums (red) the blocks when it partitions none of
    them, or writes the first block's tile when it partitions nothing the output is computed from:
    `MappingProblem.once`) and forbids the loop from partitioning a class an output keeps;
  * a loader whose tile meets post-loop values (`invariant`) is never walked by the loop.
Grid dims are interchangeable (symmetry) and one that partitions nothing only multiplies work: the
canonical mapping lists its non-empty class sets sorted by smallest class (one idle dim if none).
`brute_force` enumerates the raw m variables directly, for the tests to check the two agree.

A mapping whose loop partitions nothing has no loop: its range is 1 and accumulators are identities
(the verifier reads a kernel with no fmap at loop range 1 the same way). An idle grid dim is still a
grid dim: its blocks replicate the work and an output sums them, which is right only if that cancels.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Sequence

from prism.ir.block import GRID_DIMS
from prism.symbolic.dims import UNIT, MVar, UnionFind

__all__ = ["Mapping", "MappingProblem", "RawMapping", "brute_force", "enumerate_mappings", "partial_variant"]


@dataclass(frozen=True)
class Mapping:
    """Classes (by representative atom) partitioned by each grid dim x, y, z, and by the loop.

    `partials`: an output a grid dim sums (it partitions none of the output's classes) keeps each block's
    tile side by side along a data dim instead (the saver maps the grid dim there, `MappingProblem.partials`),
    and a kernel-level group_sum folds them back: the split-KV form without atomics (deterministic, no
    zeroed buffer). Same structure, same function; `partial_variant` makes it from the summing mapping.
    `tail` (with `partials`): that second kernel has a block per row of the first (the grid dims of the first
    that map the same data dim in all it saves: `prism.symbolic.structure.tail_rows`) and runs in the first's
    last block of each row (prism.codegen.tail): one launch less. A µGraph of its own, verified on its own.
    `walk` (with `partials`): that second kernel's loop walks the partials, one split per iteration, and its
    accumulators sum them (no group op): right only when its loop range is the first kernel's split count, which
    its instantiation sets, and its proof states (class D of prism.workloads.constrained).
    `group` (with `partials`, > 1): the first kernel sums each tile of a kept sum in groups of `group` columns
    (group_sum) instead of whole, and the second sums the groups of all splits (class B): right only where the
    tiles hold whole groups. Variants of a partials mapping (prism.symbolic.structure.walk_variant,
    group_variant), each verified under the size constraints its proof needs."""

    grid: tuple[tuple[int, ...], ...]
    loop: tuple[int, ...]
    partials: bool = False
    tail: bool = False
    walk: bool = False
    group: int = 0

    @property
    def n_grid(self) -> int:
        return max(1, len(self.grid))

    def grid_of(self, cls: int) -> int | None:
        for p, classes in enumerate(self.grid):
            if cls in classes:
                return p
        return None

    def to_json(self) -> dict:
        return {"grid": [list(g) for g in self.grid], "loop": list(self.loop)} | \
            ({"partials": True} if self.partials else {}) | ({"tail": True} if self.tail else {}) | \
            ({"walk": True} if self.walk else {}) | ({"group": self.group} if self.group else {})

    @classmethod
    def from_json(cls, data: dict) -> Mapping:
        return cls(tuple(tuple(g) for g in data["grid"]), tuple(data["loop"]), bool(data.get("partials", False)),
                   bool(data.get("tail", False)), bool(data.get("walk", False)), int(data.get("group", 0)))

    @property
    def variant(self) -> tuple[bool, bool, bool, int]:
        """How its kernels combine the blocks' sums, apart from the maps: (partials, tail, walk, group)."""
        return self.partials, self.tail, self.walk, self.group

    @property
    def form(self) -> str:
        """How its kernels combine the blocks' sums, in a few words (a tuning report's forms)."""
        if not self.partials:
            return "fused"
        return "partials" + ("+tail" if self.tail else "+walk (class D)" if self.walk else
                             "+group (class B)" if self.group else "")

    @property
    def constrained(self) -> bool:
        """Whether it is a form right only for some parallel sizes (walk, group): proved under constraints."""
        return self.walk or self.group > 0


@dataclass(frozen=True)
class RawMapping:
    """The paper's raw form: per loader an imap (data dim or None per grid dim) and fmap; per output an omap."""

    k: int
    imaps: tuple[tuple[int | None, ...], ...]
    fmaps: tuple[int | None, ...]
    omaps: tuple[tuple[int | None, ...], ...]


@dataclass(frozen=True)
class MappingProblem:
    """What mapping instantiation needs from a structure: loader and output dims, and the classes."""

    loaders: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    uf: UnionFind
    invariant: frozenset[int] = frozenset()   # loaders the loop must not walk (their tiles meet post-loop values)
    cones: tuple[frozenset[int], ...] = ()
    """Per output, the loaders it is computed from (empty: not known, so every output is taken to read every
    loader). A grid dim that maps no loader of an output's cone gives all its blocks the same tile of it: the
    output is written once along it (`once`) instead of summing those copies."""

    def cls(self, atom: int) -> int:
        return self.uf.find(atom)

    @property
    def classes(self) -> tuple[int, ...]:
        return tuple(sorted({self.cls(a) for dims in self.loaders for a in dims if a != UNIT}))

    def _groups(self, outputs: bool) -> list[list[int]]:
        tensors = list(self.loaders) + (list(self.outputs) if outputs else [])
        return [[self.cls(a) for a in dims if a != UNIT] for dims in tensors]

    def grid_ok(self, c: int) -> bool:
        return all(g.count(c) <= 1 for g in self._groups(True))

    def loop_ok(self, c: int) -> bool:
        groups = self._groups(True)
        return all(g.count(c) <= 1 for g in groups[:len(self.loaders)]) and \
            all(c not in g for g in groups[len(self.loaders):]) and \
            all(c not in groups[t] for t in self.invariant)

    def conflicts(self, outputs: bool) -> set[frozenset[int]]:
        """Pairs of classes that some loader (or output, if `outputs`) holds both of."""
        out = set()
        for g in self._groups(outputs):
            out.update(frozenset(p) for p in itertools.combinations(sorted(set(g)), 2))
        return out

    # -- maps -----------------------------------------------------------------------------------

    def maps(self, m: Mapping) -> tuple[list[tuple[dict[str, int], int | None]], list[dict[str, int]]]:
        """(imap, fmap) per loader and omap per output, as BlockGraph takes them. Made once per mapping (the
        search asks for them several times per mapping: partials, tail rows, the instance); shared, so
        callers must not change them."""
        key = (m.grid, m.loop)   # the same for its partials and tail variants
        if key not in self._maps:
            self._maps[key] = self._make_maps(m)
        return self._maps[key]

    @cached_property
    def _maps(self) -> dict[tuple, tuple[list[tuple[dict[str, int], int | None]], list[dict[str, int]]]]:
        return {}

    def _make_maps(self, m: Mapping) -> tuple[list[tuple[dict[str, int], int | None]], list[dict[str, int]]]:
        grid_of = {c: GRID_DIMS[p] for p, classes in enumerate(m.grid) for c in classes}

        def gmap(dims: Sequence[int]) -> dict[str, int]:
            out = {}
            for d, a in enumerate(dims):
                p = None if a == UNIT else grid_of.get(self.cls(a))
                if p is not None:
                    out[p] = d
            return dict(sorted(out.items()))
        loaders = []
        for dims in self.loaders:
            f = [d for d, a in enumerate(dims) if a != UNIT and self.cls(a) in m.loop]
            loaders.append((gmap(dims), f[0] if f else None))
        return loaders, [gmap(dims) for dims in self.outputs]

    def once(self, m: Mapping) -> list[tuple[str, ...]]:
        """Per output, the grid dims it is written once along: those of `m.grid` that map none of its dims and
        none of the loaders it is computed from (`cones`), so every block along them computes the same tile.
        Made once per mapping, as `maps` is, and shared."""
        key = (m.grid, m.loop)
        if key not in self._once:
            self._once[key] = self._make_once(m)
        return self._once[key]

    @cached_property
    def _once(self) -> dict[tuple, list[tuple[str, ...]]]:
        return {}

    def _make_once(self, m: Mapping) -> list[tuple[str, ...]]:
        loaders, omaps = self.maps(m)
        if not self.cones:
            return [() for _ in omaps]
        return [tuple(GRID_DIMS[p] for p in range(len(m.grid)) if GRID_DIMS[p] not in omap
                      and not any(GRID_DIMS[p] in loaders[t][0] for t in cone))
                for omap, cone in zip(omaps, self.cones)]

    def partials(self, m: Mapping) -> list[dict[str, int]] | None:
        """Per output, {grid dim: data dim} for each grid dim that sums it (neither maps it nor writes it `once`),
        the data dim its partials go side by side along: the last dims no grid dim maps, one each (None where an
        output has too few). Made once per mapping, as `maps` is, and shared."""
        key = (m.grid, m.loop)
        if key not in self._partials:
            self._partials[key] = self._make_partials(m)
        return self._partials[key]

    @cached_property
    def _partials(self) -> dict[tuple, list[dict[str, int]] | None]:
        return {}

    def _make_partials(self, m: Mapping) -> list[dict[str, int]] | None:
        _, omaps = self.maps(m)
        out = []
        for dims, omap, once in zip(self.outputs, omaps, self.once(m)):
            summed = [g for g in GRID_DIMS[:len(m.grid)] if g not in omap and g not in once]
            free = [d for d in reversed(range(len(dims))) if d not in omap.values()]
            if len(free) < len(summed):
                return None
            out.append(dict(zip(summed, free)))
        return out

    def raw(self, m: Mapping) -> RawMapping:
        loaders, omaps = self.maps(m)
        dims = GRID_DIMS[: m.n_grid]
        return RawMapping(m.n_grid, tuple(tuple(im.get(p) for p in dims) for im, _ in loaders),
                          tuple(f for _, f in loaders), tuple(tuple(om.get(p) for p in dims) for om in omaps))

    def m_values(self, m: Mapping, names: Sequence[str] | None = None) -> dict[MVar, int]:
        """The paper's Boolean variables m[T,d,p] for loaders (grid dims and loop "i") and outputs."""
        raw = self.raw(m)
        out: dict[MVar, int] = {}
        for t, dims in enumerate(self.loaders):
            name = names[t] if names else f"in{t}"
            for d in range(len(dims)):
                for p, g in enumerate(GRID_DIMS[: raw.k]):
                    out[MVar(name, d, g)] = int(raw.imaps[t][p] == d)
                out[MVar(name, d, "i")] = int(raw.fmaps[t] == d)
        for o, dims in enumerate(self.outputs):
            for d in range(len(dims)):
                for p, g in enumerate(GRID_DIMS[: raw.k]):
                    out[MVar(f"out{o}", d, g)] = int(raw.omaps[o][p] == d)
        return out

    def canonical(self, raw: RawMapping) -> Mapping | None:
        """The class-level mapping of a raw one, or None if the raw one breaks a constraint."""
        grid_m: dict[int, set[int]] = {}
        loop_m: dict[int, int] = {}
        for t, dims in enumerate(self.loaders):
            for d, a in enumerate(dims):
                ps = {p for p in range(raw.k) if raw.imaps[t][p] == d}
                f = int(raw.fmaps[t] == d)
                if a == UNIT:
                    if ps or f:
                        return None
                    continue
                c = self.cls(a)
                if grid_m.setdefault(c, ps) != ps or loop_m.setdefault(c, f) != f:
                    return None  # dimension matching: one class, one partitioning
                if f and t in self.invariant:
                    return None  # its tile meets post-loop values: the loop must not walk it
        for o, dims in enumerate(self.outputs):
            for d, a in enumerate(dims):
                ps = {p for p in range(raw.k) if raw.omaps[o][p] == d}
                if a == UNIT:
                    if ps:
                        return None
                elif ps != grid_m[self.cls(a)] or loop_m[self.cls(a)]:
                    return None  # full output extent must equal the program's for all d_p
        by_dim = [tuple(sorted(c for c, ps in grid_m.items() if p in ps)) for p in range(raw.k)]
        grid = tuple(sorted(g for g in by_dim if g))
        return Mapping(grid, tuple(sorted(c for c, f in loop_m.items() if f)))


def partial_variant(problem: MappingProblem, m: Mapping) -> Mapping | None:
    """`m` with its summed outputs kept as partials and folded back by group sums; None if no output of `m`
    is summed over a grid dim (nothing to keep apart) or one has no free dim to keep them along."""
    folds = problem.partials(m)
    if m.partials or folds is None or not any(folds):
        return None
    return Mapping(m.grid, m.loop, partials=True)


def _independent_sets(items: Sequence[int], conflicts: set[frozenset[int]]) -> Iterator[tuple[int, ...]]:
    def rec(k: int, chosen: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if k == len(items):
            yield chosen
            return
        yield from rec(k + 1, chosen)
        if all(frozenset((c, items[k])) not in conflicts for c in chosen):
            yield from rec(k + 1, chosen + (items[k],))
    yield from rec(0, ())


def _grid_partitions(items: Sequence[int], conflicts: set[frozenset[int]], max_grid: int
                     ) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Disjoint conflict-free class sets, at most `max_grid`, sorted by smallest member."""
    def rec(k: int, blocks: tuple[tuple[int, ...], ...]) -> Iterator[tuple[tuple[int, ...], ...]]:
        if k == len(items):
            yield blocks
            return
        c = items[k]
        yield from rec(k + 1, blocks)
        for b, block in enumerate(blocks):
            if all(frozenset((x, c)) not in conflicts for x in block):
                yield from rec(k + 1, blocks[:b] + (block + (c,),) + blocks[b + 1:])
        if len(blocks) < max_grid:
            yield from rec(k + 1, blocks + ((c,),))
    yield from rec(0, ())


def enumerate_mappings(problem: MappingProblem, max_grid: int = 3) -> Iterator[Mapping]:
    """Every canonical mapping satisfying the constraints, each once (grid dims modulo permutation)."""
    classes = problem.classes
    grid_classes = [c for c in classes if problem.grid_ok(c)]
    loop_classes = [c for c in classes if problem.loop_ok(c)]
    loops = list(_independent_sets(loop_classes, problem.conflicts(False)))
    for grid in _grid_partitions(grid_classes, problem.conflicts(True), max_grid):
        for loop in loops:
            yield Mapping(grid, loop)


def brute_force(problem: MappingProblem, max_grid: int = 3) -> set[Mapping]:
    """All raw m assignments for k = 1..max_grid that satisfy the constraints, made canonical.

    Tensor by tensor over the raw imap/fmap/omap rows, dropping a partial assignment as soon as
    `canonical` would (the same constraints, checked early so the tests stay fast).
    """
    out: set[Mapping] = set()
    n_in = len(problem.loaders)
    for k in range(1, max_grid + 1):
        def rows(rank: int) -> list[tuple[int | None, ...]]:
            return [r for r in itertools.product([None, *range(rank)], repeat=k)
                    if len([d for d in r if d is not None]) == len({d for d in r if d is not None})]

        def rec(t: int, im: tuple, fm: tuple, om: tuple) -> None:
            loaders = problem.loaders[:min(t, n_in)]
            partial = MappingProblem(loaders, problem.outputs[:max(0, t - n_in)], problem.uf,
                                     frozenset(i for i in problem.invariant if i < len(loaders)))
            if t and partial.canonical(RawMapping(k, im, fm, om)) is None:
                return
            if t == n_in + len(problem.outputs):
                out.add(problem.canonical(RawMapping(k, im, fm, om)))  # type: ignore[arg-type]
            elif t < n_in:
                for r in rows(len(problem.loaders[t])):
                    for f in [None, *range(len(problem.loaders[t]))]:
                        rec(t + 1, im + (r,), fm + (f,), om)
            else:
                for r in rows(len(problem.outputs[t - n_in])):
                    rec(t + 1, im, fm, om + (r,))
        rec(0, (), (), ())
    return out
