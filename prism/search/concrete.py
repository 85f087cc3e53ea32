"""The ablation modes: maps enumerated during generation (Mirage's way) instead of left symbolic.

A concrete imap or fmap is fixed for every loader before the structure search starts (one search
per choice); dimension matching then also compares the fixed choices (`Draft.labels`). A concrete
omap is chosen for each output when a structure is emitted (one structure per choice). Mapping
instantiation afterwards enumerates only what is still symbolic, so every mode returns the same
graphs; what changes is how much work generation does (the paper's ablation, §7.5). The Mirage-style
mode also fixes grid sizes and loop ranges (`size_choices`, Mirage's baseline ranges) and repeats the
structure search for each, checking every concrete candidate as it appears.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Sequence

from prism.errors import InputError
from prism.symbolic.dims import UNIT, AtomSpace
from prism.symbolic.draft import Draft, Labels
from prism.symbolic.mapping import Mapping, MappingProblem
from prism.symbolic.structure import Structure

__all__ = ["GRID_TILES", "LOOP_RANGES", "MAX_BLOCKS", "Modes", "grid_rows", "label_choices", "matches_fixed",
           "omap_choices", "raw_k", "size_choices"]

Row = tuple[int | None, ...]


GRID_TILES = (8, 16, 32, 64, 128, 256)
"""Mirage's baseline grids: a grid dim of size D/t for these tiles t (at least 2 blocks along it)."""
LOOP_RANGES = (4, 16, 64)
"""Mirage's baseline loop ranges."""
MAX_BLOCKS = 4096


@dataclass(frozen=True)
class Modes:
    """Which maps stay symbolic during generation (the default) and which are enumerated (ablation);
    `sizes=False` also enumerates grid sizes and loop ranges (the fully concrete, Mirage-style mode)."""

    imap: bool = True
    fmap: bool = True
    omap: bool = True
    sizes: bool = True

    @classmethod
    def parse(cls, code: str) -> Modes:
        """From the paper's notation: "SSS" (all symbolic) ... "CCC" (imap, fmap, omap concrete), or
        "mirage" (maps, grid sizes and loop ranges all enumerated during the search)."""
        if code == "mirage":
            return cls(False, False, False, False)
        if not isinstance(code, str) or len(code) != 3 or set(code) - {"S", "C"}:
            raise InputError(f"modes: expected three letters S (symbolic) or C (concrete) for imap, fmap, omap, "
                             f"such as SSS or CCS, or 'mirage'; got {code!r}")
        return cls(*(c == "S" for c in code))

    @property
    def code(self) -> str:
        if not self.sizes:
            return "mirage"
        return "".join("S" if s else "C" for s in (self.imap, self.fmap, self.omap))


def grid_rows(dims: Sequence[int], k: int) -> list[Row]:
    """Every row (data dim or None per grid dim, distinct dims, never a UNIT dim) for one tensor."""
    live = [None] + [d for d, a in enumerate(dims) if a != UNIT]
    return [r for r in itertools.product(live, repeat=k)
            if len([d for d in r if d is not None]) == len({d for d in r if d is not None})]


def _canonical(rows: Sequence[Row], k: int) -> bool:
    """Lexicographically smallest under every permutation of the k grid dims (symmetry breaking)."""
    def key(rs: Sequence[Row]) -> tuple:
        return tuple(-1 if d is None else d for r in rs for d in r)
    mine = key(rows)
    return all(key([tuple(r[p] for p in perm) for r in rows]) >= mine for perm in itertools.permutations(range(k)))


def label_choices(space: AtomSpace, modes: Modes, max_grid: int) -> Iterator[Labels | None]:
    """The fixed imap/fmap choices to start one structure search from (just None if both symbolic)."""
    if modes.imap and modes.fmap:
        yield None
        return
    n = len(space.shapes)
    dims = [space.input_dims(i) for i in range(n)]
    grids: list[tuple[int, tuple[Row, ...]] | None] = [None]
    if not modes.imap:
        grids = []
        for k in range(1, max_grid + 1):
            for rows in itertools.product(*(grid_rows(d, k) for d in dims)):
                used = {p for r in rows for p, d in enumerate(r) if d is not None}
                if (len(used) == k or (k == 1 and not used)) and _canonical(rows, k):
                    grids.append((k, rows))
    fmaps: list[tuple[int | None, ...] | None] = [None]
    if not modes.fmap:
        fmaps = list(itertools.product(*([None] + [d for d, a in enumerate(ds) if a != UNIT] for ds in dims)))
    for grid in grids:
        for fmap in fmaps:
            labels = []
            for i, ds in enumerate(dims):
                for d in range(len(ds)):
                    g = -2 if grid is None else next((p for p, dd in enumerate(grid[1][i]) if dd == d), -1)
                    f = -2 if fmap is None else int(fmap[i] == d)
                    labels.append((g, f))
            yield tuple(labels)


def size_choices(space: AtomSpace, labels: Labels) -> list[tuple[tuple[int, ...], int]]:
    """Mirage-style concrete (grid sizes, loop range) for a concrete imap/fmap: each used grid dim
    leaves tiles of 8..256 on every dim it splits, the loop range is 4, 16 or 64, at most 4096 blocks."""
    k = raw_k(labels) or 1
    grid_options = []
    for p in range(k):
        extents = [space.extent(a) for a, (g, _) in enumerate(labels) if g == p]
        if not extents:
            grid_options.append([1])
            continue
        sizes = sorted({min(extents) // t for t in GRID_TILES if min(extents) % t == 0 and min(extents) // t >= 2})
        grid_options.append([n for n in sizes if all(e % n == 0 for e in extents)])
    out = []
    for grid in itertools.product(*grid_options):
        if _prod(grid) > MAX_BLOCKS:
            continue
        split = [space.extent(a) // (grid[g] if g >= 0 else 1) for a, (g, f) in enumerate(labels) if f == 1]
        loops = [n for n in LOOP_RANGES if all(e % n == 0 for e in split)] if split else [1]
        out.extend((tuple(grid), n) for n in loops)
    return out


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def raw_k(labels: Labels | None) -> int | None:
    """The number of grid dims a concrete imap uses (None when the imap is symbolic)."""
    if labels is None or all(g == -2 for g, _ in labels):
        return None
    return max([g for g, _ in labels] + [0]) + 1


def omap_choices(s: Draft, outputs: Sequence[int], max_grid: int) -> Iterator[tuple[Row, ...]]:
    """Concrete omaps for the saved tensors: every row, checked against a concrete imap/fmap at once."""
    dims = [s.dims[o] for o in outputs]
    k_fixed = raw_k(s.labels)
    for k in [k_fixed] if k_fixed is not None else range(1, max_grid + 1):
        for rows in itertools.product(*(grid_rows(d, k) for d in dims)):
            if k_fixed is None and not _canonical(rows, k):
                continue
            if s.labels is not None and not _consistent(s, dims, rows, k_fixed):
                continue
            yield rows


def _consistent(s: Draft, dims: Sequence[Sequence[int]], rows: Sequence[Row], k: int | None) -> bool:
    """Output extents must equal the program's: a dim is combed by the grid dim splitting its class."""
    for ds, row in zip(dims, rows):
        for d, a in enumerate(ds):
            if a == UNIT:
                continue
            g, f = s.labels[s.uf.find(a)]  # type: ignore[index]
            if f == 1:
                return False
            if k is not None and {p for p, dd in enumerate(row) if dd == d} != ({g} if g >= 0 else set()):
                return False
    return True


def matches_fixed(st: Structure, problem: MappingProblem, m: Mapping) -> bool:
    """Whether canonical mapping `m` is the one (modulo grid-dim order) the fixed choices describe."""
    labels = st.graph.labels
    k = raw_k(labels)
    if st.omaps is not None and st.omaps:
        k = len(st.omaps[0])
    if k is None:
        return _agrees(st, problem, m, None)
    return any(_agrees(st, problem, m, pi) for pi in itertools.permutations(range(k), len(m.grid))) \
        if len(m.grid) <= k else False


def _agrees(st: Structure, problem: MappingProblem, m: Mapping, pi: tuple[int, ...] | None) -> bool:
    labels = st.graph.labels
    space = st.graph.space
    for a in range(len(space)):
        if space.extent(a) == 1:
            continue
        c = problem.cls(a)
        q = m.grid_of(c)
        if labels is not None:
            g, f = labels[a]
            if g != -2 and pi is not None and g != (-1 if q is None else pi[q]):
                return False
            if f != -2 and f != int(c in m.loop):
                return False
    if st.omaps is not None and pi is not None:
        for o, (ds, row) in enumerate(zip(problem.outputs, st.omaps)):
            for p, d in enumerate(row):
                qs = [q for q in range(len(m.grid)) if pi[q] == p]
                want = [dd for dd, a in enumerate(ds) if a != UNIT and qs and problem.cls(a) in m.grid[qs[0]]]
                if (want[0] if want else None) != d:
                    return False
    return True
