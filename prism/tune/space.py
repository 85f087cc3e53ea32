"""Parameter instantiation (paper §5): the valid grid sizes, loop range, warps and stages of every
verified sGraph.

A verified sGraph fixes its maps; what is left are its parallel sizes, one per grid dim and the loop
range, which fix every tile shape (a class split g ways by its grid dim and l ways by the loop has tiles
of extent / (g·l): wide column tiles, split-K over a grid dim summed at the output, and the loop's
range are all points of some sGraph), and how its kernels are compiled: warps per block and
software-pipelining stages (prism.ir.Launch), which never change what is computed. Each parallel size
splits the dims of one or more *classes* (atoms that dimension matching made equal), so a point
(grid, loop) is valid when, for every class c split f = grid[p] · loop ways by grid dim p and/or the loop,

    tile(c) = prism.ir.block.split(extent(c), f, l) exists  f equal tiles, or f tiles of a power of two t
                                                            with ceil(extent / t) = f, the last partial, or
                                                            where the loop walks c (l = loop), fewer real
                                                            ones: f - ceil(extent / t) < min(l, f / l)
    tile(c) is a power of two, or c is not split at all
    the tiles are equal if the loop splits c and a value carried across iterations (an accumulator, a
    running max) keeps c: the kernel masks a partial tile only where it is consumed inside the loop
    ∏ grid ≤ target.max_blocks,  grid[y], grid[z] ≤ 65535  a cap on blocks; CUDA's limit on y and z
    every tile ≤ 2^20 elements (padded)                     Triton's largest block (a tail's too, below)
    smem(grid, loop, stages) ≤ target.smem_per_block        the estimate below (227 KiB on sm_90)
    the sGraph's size constraints hold                      what its proof needs (prism.ir.sizes), at the
                                                            sizes of every kernel the point instantiates

and its launch (warps, stages) is valid when warps ∈ WARPS with 32·warps ≤ the largest padded tile (every
thread has a lane; one warp always qualifies), and stages ∈ STAGE_VALUES when the loop has more than one
iteration (Triton pipelines loop loads; with one iteration stages change nothing, so only its default).

Tiles are padded as code generation pads them: to the next power of two, and to at least 16 on the
dims Triton's dot uses (so small tiles are allowed; the cost model charges for the waste, and for a partial
last tile's: it counts f whole tiles, f · t elements, as the kernel walks them, a tile wholly past the extent
at the cost of the iteration that masks it). Shared memory is estimated as Triton spends it on sm_90: each
operand of Triton's dot is staged through shared memory in the matmul's dtype, `staged_copies(stages)` deep
when it is loaded anew every loop iteration (software pipelining), once otherwise. Against Triton 3.7's own
figure for sm_90 this is within about 2x either way (measured on sampled rmsnorm and attention points); the
tuner compiles the survivors ahead of time and checks the real figure, so the estimate only has to prune what
cannot fit.

A tail form (its second kernel run by the last block of each row of the first, prism.codegen.tail) runs
that kernel's blocks on the first kernel's grid: a block holds a row's partials whole, the first kernel's
saved tiles times the blocks side by side in them, and that tile counts among the tiles above.

`Space` is the union over all sGraphs of a search result: its points are (graph, grid, loop, warps,
stages) candidates, sampled uniformly and reproducibly (`sample(k, seed)`); `neighbours(c)` are the
points one step away, which the tuner's refinement walks.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from prism.codegen.layout import MIN_DOT
from prism.errors import MappingError
from prism.ir import KernelGraph, Launch
from prism.ir.block import GRID_DIMS, split
from prism.ir.kinds import ACCUMULATORS
from prism.ir.ops import TORCH_DTYPES, contracts
from prism.ir.graph import parallel_sizes
from prism.ir.sizes import grid_size_name, kernel_of, loop_size_name, violations
from prism.symbolic.dims import UNIT
from prism.symbolic.draft import LOAD_OP, RUNNING_MAX_OP
from prism.symbolic.structure import later_sizes, tail_rows
from prism.tune.target import H100, Target

__all__ = ["GEMV_PER_THREAD", "GEMV_ROWS", "MAX_NUMEL", "STAGE_VALUES", "TRITON_STAGES", "WARPS", "Candidate",
           "Footprint", "GraphSpace", "Space", "Variable", "instantiate", "located", "staged_copies"]

MAX_NUMEL = 1 << 20
"""Triton's largest block, in elements."""
WARPS = (1, 2, 4, 8, 16)
"""Warps per block the space offers."""
STAGE_VALUES = (1, 2, 3, 4)
"""Software-pipelining stages the space offers for a loop of more than one iteration."""
TRITON_STAGES = 3
"""Triton's default `num_stages` on NVIDIA GPUs (what a kernel without a launch choice gets)."""
GEMV_ROWS = 16
"""The most rows (M) of every matmul at which a tiling also offers a GEMV launch (prism.ir.Launch): decode at
batch 1 to 16, where Triton's dot pads M to 16 and the weight's bytes, not its FLOPs, set the time."""
GEMV_PER_THREAD = 128
"""The most elements of a GEMV's product [..., M, K, N] per thread a launch may hold (float32 values in registers:
half of the 255 a thread has). The product lives in registers, and past this LLVM runs out of memory compiling it
(attention's [2, 2, 128, 1024] at one warp: 16384 a thread)."""


def staged_copies(stages: int) -> int:
    """Copies of a per-iteration operand of Triton's dot in shared memory at `stages` (Triton 3.7 on sm_90 was
    measured to use 1 to 3 times the operand size at its default of 3 stages; stages - 1 sits in the middle)."""
    return max(1, stages - 1)


@dataclass(frozen=True, order=True)
class Candidate:
    """One point of the space: sGraph `graph` (its index in the search result) at `grid` and `loop`, its
    kernels compiled with `warps` per block and `stages` (0: code generation's and Triton's defaults), their
    products as tensor-core dots or, with `gemv`, as multiplies and sums (prism.ir.Launch)."""

    graph: int
    grid: tuple[int, ...]
    loop: int
    warps: int = 0
    stages: int = 0
    gemv: bool = False

    def __str__(self) -> str:
        grid = ", ".join(f"{p}={g}" for p, g in zip(GRID_DIMS, self.grid))
        launch = "".join(f" {k}={v}" for k, v in (("warps", self.warps), ("stages", self.stages)) if v)
        return f"#{self.graph} grid({grid}) loop={self.loop}{launch}{' gemv' * self.gemv}"

    @property
    def launch(self) -> Launch:
        return Launch(self.warps or None, self.stages or None, gemv=self.gemv)

    @property
    def sizes(self) -> Candidate:
        """The same sGraph and sizes at the default launch (what the tile shapes alone decide)."""
        return Candidate(self.graph, self.grid, self.loop)

    def to_json(self) -> dict:
        return {"graph": self.graph, "grid": list(self.grid), "loop": self.loop, "warps": self.warps,
                "stages": self.stages} | ({"gemv": True} if self.gemv else {})

    @classmethod
    def from_json(cls, data: dict) -> Candidate:
        return cls(int(data["graph"]), tuple(int(g) for g in data["grid"]), int(data["loop"]),
                   int(data.get("warps", 0)), int(data.get("stages", 0)), bool(data.get("gemv", False)))

    @classmethod
    def parse(cls, text: str) -> Candidate:
        """The candidate `str` wrote (a stored sample's label, prism.tune.oracle), or a ValueError."""
        m = re.fullmatch(r"#(\d+) grid\(([^)]*)\) loop=(\d+)(?: warps=(\d+))?(?: stages=(\d+))?( gemv)?", text)
        if not m:
            raise ValueError(f"not a candidate: {text!r}")
        grid = tuple(int(part.split("=")[1]) for part in m[2].split(", "))
        return cls(int(m[1]), grid, int(m[3]), int(m[4] or 0), int(m[5] or 0), bool(m[6]))


@dataclass(frozen=True)
class Variable:
    """A parallel size: grid dim "x"/"y"/"z" or "loop"; the classes it splits, their extents, its values."""

    name: str
    classes: tuple[int, ...]
    extents: tuple[int, ...]
    values: tuple[int, ...]


@dataclass(frozen=True)
class Footprint:
    """What a point asks of one block: shared memory (estimated), blocks, the largest padded tile."""

    blocks: int
    smem: int
    max_numel: int


def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def _next_pow2(n: np.ndarray | int) -> np.ndarray:
    """prism.ir.block.next_pow2 of each entry, over an array (at least 1): as code generation pads a tile dim."""
    return np.left_shift(1, np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _shares(extent: int) -> set[int]:
    """Every parallel size that may split a dim of `extent`, alone or with another (`split`): the divisors of
    each number of tiles it splits into (its divisors, and n = ceil(extent / 2^k)), and for tiles of each
    power of two, a power of two g of blocks with the ceil(n / g) iterations each walks, the last block's
    later ones wholly past the extent (4097 = 128·32 + 1 in 4 blocks of 33 tiles of 32)."""
    out: set[int] = set()
    for n in set(_divisors(extent)) | {-(-extent // (1 << k)) for k in range(extent.bit_length())}:
        out.update(_divisors(n))
        out.update(v for k in range(1, n.bit_length()) for v in (1 << k, -(-n // (1 << k))))
    return out


def _uneven(extent: int, blocks: int, loop: int = 1, even: bool = False) -> str | None:
    """Why a dim of `extent` split over `blocks` blocks of `loop` iterations breaks the tile rules (tiles of a
    power of two, the last one partial unless `even`, every block holding one), or None."""
    f = blocks * loop
    tile = split(extent, f, loop)
    if tile is None:
        return f"a dim of extent {extent} does not split into {blocks} block(s) of {loop} tile(s)"
    if f > 1 and not _pow2(tile):
        return f"a dim of extent {extent} split {f} ways gives tiles of {tile}, not a power of two"
    if even and extent % f:
        return (f"a dim of extent {extent} split {f} ways leaves a partial last tile, but a value carried across "
                "the loop keeps it")
    return None


class GraphSpace:
    """The valid (grid, loop) points of one verified sGraph at concrete input shapes."""

    def __init__(self, sgraph, shapes: Sequence[Sequence[int]], dtype: str = "float16",
                 target: Target = H100, index: int = 0) -> None:
        st, m = sgraph.structure, sgraph.mapping
        self.sgraph, self.index, self.target = sgraph, index, target
        self.shapes = [tuple(s) for s in shapes]
        self.itemsize = TORCH_DTYPES[dtype].itemsize
        g = st.graph
        self.mapping = m
        self.extent: dict[int, int] = {}
        for a, (i, d) in enumerate(g.space.atoms):
            if g.space.shapes[i][d] != 1:
                self.extent[g.uf.find(a)] = self.shapes[i][d]
        names = GRID_DIMS[: m.n_grid]
        split = [tuple(m.grid[p]) if p < len(m.grid) else () for p in range(m.n_grid)] + [tuple(m.loop)]
        self.variables = [self._variable(n, cs) for n, cs in zip(list(names) + ["loop"], split)]
        loaders, _ = st.problem().maps(m)
        self.ops = g.ops
        self.fmap = {k: loaders[op.attrs[0]][1] for k, op in enumerate(g.ops) if op.op == LOAD_OP}
        dot_classes: set[int] = set()
        dot_units: set[tuple[int, int]] = set()
        for k, op in enumerate(g.ops):
            if contracts(op.op):
                for t in (*op.inputs, k):
                    rank = len(g.dims[t])
                    for d in (rank - 2, rank - 1):
                        a = g.dims[t][d]
                        if a == UNIT:
                            dot_units.add((t, d))
                        else:
                            dot_classes.add(g.uf.find(a))
        # Tables that make a tiling's tiles cheap to compute (a space can have ~10^5 tilings to check):
        # each class's extent and what splits it, and each tensor's dims as indices into `_padded_sizes`.
        self._classes = sorted(self.extent)
        slot = {c: i for i, c in enumerate(self._classes)}
        carried = {g.uf.find(a) for k, op in enumerate(g.ops) if op.op in ACCUMULATORS or op.op == RUNNING_MAX_OP
                   for a in g.dims[k] if a != UNIT}
        self._splits = [(self.extent[c], m.grid_of(c), c in m.loop, c in m.loop and c in carried)
                        for c in self._classes]
        n = len(self._classes)

        def index(k: int, d: int, a: int) -> int:
            if a == UNIT:
                return int((k, d) in dot_units)
            c = g.uf.find(a)
            return 2 + slot[c] + (n if c in dot_classes else 0)

        self._dims = [tuple(index(k, d, a) for d, a in enumerate(dims)) for k, dims in enumerate(g.dims)]
        self._tile_dims = sorted(set(self._dims))
        self._dot_operands = [(self._dims[o], g.ops[o].op == LOAD_OP and self.fmap[o] is not None)
                              for op in g.ops if contracts(op.op) for o in op.inputs]
        # a GEMV launch's products (prism.ir.Launch): per matmul, the dims of a [..., M, K] and N of b
        self._products = [(self._dims[op.inputs[0]], self._dims[op.inputs[1]][-1]) for op in g.ops
                          if contracts(op.op)]
        self._gemv: dict[tuple[tuple[int, ...], int], int] = {}   # a GEMV's largest tile by tiling (0: not one)
        self._tail_tiles = self._tail(st, m, slot) if m.tail else []
        self._tilings: list[tuple[tuple[int, ...], int]] | None = None
        self._valid: set[tuple[tuple[int, ...], int]] | None = None
        self._later: dict[tuple[int, ...], dict[str, int]] = {}   # the later kernels' sizes by the first's grid
        self._launches: dict[tuple[tuple[int, ...], int], tuple[tuple[int, int, bool], ...]] = {}
        self._counts: dict[tuple[tuple[int, ...], int], int] = {}   # len(launches) by tiling
        self._footprints: dict[tuple[tuple[int, ...], int], tuple[int, int, int]] = {}

    def _tail(self, st, m, slot: dict[int, int]) -> list[list[tuple[int | None, int | None]]]:
        """A tail form's second kernel holds the first's saved tiles times the blocks that lie side by side in
        them, but for its rows (prism.symbolic.structure.tail_rows): per saved tensor, per dim, (class slot of
        the first kernel's tile or None for a unit dim, grid dim index whose blocks multiply it or None)."""
        problem = st.problem()
        _, omaps = problem.maps(m)
        rows = set(tail_rows(st, m))
        out = []
        for o, omap, fold in zip(st.outputs, omaps, problem.partials(m) or []):
            by_dim = {d: GRID_DIMS.index(p) for p, d in (omap | fold).items() if p not in rows}
            out.append([(None if a == UNIT else slot[st.graph.uf.find(a)], by_dim.get(d))
                        for d, a in enumerate(st.graph.dims[o])])
        return out

    def _variable(self, name: str, classes: tuple[int, ...]) -> Variable:
        """Its values: the sizes that divide some number of tiles every class it splits can have (with the loop's
        share, a class split by a grid dim and the loop splits into grid · loop tiles)."""
        extents = tuple(self.extent[c] for c in classes)
        shares = [_shares(e) for e in extents]
        values = tuple(sorted(set.intersection(*shares))) if classes else (1,)
        return Variable(name, classes, extents, values)

    @property
    def n_grid(self) -> int:
        return self.mapping.n_grid

    def broken(self, grid: tuple[int, ...], loop: int) -> list[str]:
        """The sGraph's size constraints a tiling breaks (prism.ir.sizes), in words: the first kernel's sizes are
        the tiling's, the later kernels' those the mapping gives (prism.symbolic.structure.later_sizes: a walk's
        loop), and any other is read off the µGraph it instantiates, once per grid (they follow from the first
        kernel's grid alone: prism.symbolic.structure.instantiate); only for an sGraph proved under constraints."""
        constraints = self.sgraph.constraints
        if not constraints:
            return []
        sizes = {grid_size_name(d, 0): n for d, n in zip(GRID_DIMS, grid)} | {loop_size_name(0): loop}
        sizes |= later_sizes(self.sgraph.structure, self.mapping, grid)
        if not all(c.names <= sizes.keys() for c in constraints):
            if grid not in self._later:
                try:
                    g = self.sgraph.instantiate(self.shapes, grid, loop)
                except MappingError as e:
                    return [str(e)]
                self._later[grid] = {n: v for n, v in parallel_sizes(g).items() if kernel_of(n)[1] > 0}
            sizes |= self._later[grid]
        return violations(constraints, sizes)

    # -- one point ------------------------------------------------------------------------------

    def _class_tiles(self, sizes: np.ndarray) -> np.ndarray:
        """Every class's tile extent (columns, in `_classes` order) at each row of `sizes`: [*grid, loop]."""
        out = np.empty((len(sizes), len(self._splits)), dtype=np.int64)
        for j, (e, p, looped, _) in enumerate(self._splits):
            f = (sizes[:, p] if p is not None else 1) * (sizes[:, -1] if looped else 1)
            out[:, j] = np.where(e % f == 0, e // f, _next_pow2(-(-e // f)))   # prism.ir.block.split
        return out

    def _padded_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """What a tensor dim's entry in `_dims` indexes (columns), at each row of `sizes`: a unit dim (1), a unit
        dim of Triton's dot (MIN_DOT), then every class's tile padded to a power of two, then the same at least
        MIN_DOT (the class on a dim of Triton's dot)."""
        pow2 = _next_pow2(self._class_tiles(sizes))
        n = len(sizes)
        return np.concatenate([np.ones((n, 1), np.int64), np.full((n, 1), MIN_DOT, np.int64), pow2,
                               np.maximum(pow2, MIN_DOT)], axis=1)

    def padded(self, k: int, grid: Sequence[int], loop: int, gemv: bool = False) -> tuple[int, ...]:
        """Tensor k's tile as code generation pads it (power of two; at least 16 on dims of Triton's dot, unless
        a GEMV launch computes its products)."""
        sizes = self._padded_sizes(np.array([[*grid, loop]], dtype=np.int64))
        sizes = (self._plain(sizes) if gemv else sizes)[0].tolist()
        return tuple(sizes[i] for i in self._dims[k])

    def _plain(self, padded: np.ndarray) -> np.ndarray:
        """`_padded_sizes` as a GEMV launch pads: nothing to Triton's dot (a unit dim of a dot stays 1, a dot's
        class its power of two)."""
        n = len(self._classes)
        plain = padded.copy()
        plain[:, 1] = 1
        plain[:, 2 + n:] = plain[:, 2:2 + n]
        return plain

    def footprint(self, grid: Sequence[int], loop: int, stages: int = TRITON_STAGES) -> Footprint:
        numel, fixed, staged = self._tiles(tuple(grid), loop)
        return Footprint(math.prod(grid), fixed + staged * staged_copies(stages), numel)

    def _tiles(self, grid: tuple[int, ...], loop: int) -> tuple[int, int, int]:
        """(largest padded tile, shared-memory bytes of operands of Triton's dot held once, bytes of one copy of
        those staged every iteration): a tiling's share of every footprint, whatever its stages (computed
        once per tiling)."""
        key = (grid, loop)
        if key not in self._footprints:
            self._measure([key])
        return self._footprints[key]

    def _measure(self, tilings: Sequence[tuple[tuple[int, ...], int]]) -> None:
        """`_tiles` of many tilings at once (a space can have 10^5 to check), into the `_footprints` cache."""
        sizes = np.array([[*grid, loop] for grid, loop in tilings], dtype=np.int64).reshape(len(tilings), -1)
        padded = self._padded_sizes(sizes)
        numel = np.ones(len(tilings), dtype=np.int64)
        for dims in self._tile_dims:
            numel = np.maximum(numel, padded[:, list(dims)].prod(axis=1))
        if self._tail_tiles:
            tiles = self._class_tiles(sizes)
            for dims in self._tail_tiles:     # the tail kernel's tiles (a tail form's second kernel)
                tail = np.ones(len(tilings), dtype=np.int64)
                for c, p in dims:
                    tail = tail * _next_pow2((tiles[:, c] if c is not None else 1) * (sizes[:, p] if p is not None else 1))
                numel = np.maximum(numel, tail)
        fixed = np.zeros(len(tilings), dtype=np.int64)
        staged = np.zeros(len(tilings), dtype=np.int64)
        looped = sizes[:, -1] > 1
        for dims, loaded in self._dot_operands:
            nbytes = padded[:, list(dims)].prod(axis=1) * self.itemsize
            if loaded:
                staged += np.where(looped, nbytes, 0)
                fixed += np.where(looped, 0, nbytes)
            else:
                fixed += nbytes
        gemv = self._gemv_tiles(padded)
        for key, row, g in zip(tilings, zip(numel.tolist(), fixed.tolist(), staged.tolist()), gemv.tolist()):
            self._footprints[key] = row
            self._gemv[key] = g
        # `_offer`'s counts at once: a space's points are counted over every tiling (`Space._all`)
        warps, stages = self._offered(numel, fixed, staged)
        n_stages = np.where(looped, sum(stages[v] for v in STAGE_VALUES), stages[TRITON_STAGES])
        n_gemv = sum(self._gemv_warps(gemv).values()) * np.where(looped, len(STAGE_VALUES), 1)
        self._counts.update(zip(tilings, (sum(warps.values()) * n_stages + n_gemv).tolist()))

    def _gemv_tiles(self, padded: np.ndarray) -> np.ndarray:
        """Per tiling (rows of `_padded_sizes`), the largest product [..., M, K, N] of its GEMV launch, or 0 where
        it offers none: offered where every matmul has at most GEMV_ROWS rows (a product with more is a
        tensor-core dot's work). Its other tiles are the dot's without the padding to MIN_DOT, within Triton's
        largest block as those are."""
        if not self._products:
            return np.zeros(len(padded), dtype=np.int64)
        plain = self._plain(padded)
        product = np.zeros(len(padded), dtype=np.int64)
        rows = np.zeros(len(padded), dtype=np.int64)
        for a, n_dim in self._products:
            product = np.maximum(product, plain[:, list(a)].prod(axis=1) * plain[:, n_dim])
            rows = np.maximum(rows, plain[:, a[-2]])
        return np.where(rows <= GEMV_ROWS, product, 0)

    @staticmethod
    def _gemv_warps(product: Any) -> dict[int, Any]:
        """Which warps a GEMV launch whose largest product has `product` elements (a number, or an array over
        tilings; 0: no GEMV) may take: every thread has an element, and none holds over GEMV_PER_THREAD."""
        return {w: (product > 0) & ((32 * w <= product) | (w == 1)) & (product <= GEMV_PER_THREAD * 32 * w)
                for w in WARPS}

    def _offered(self, numel: Any, fixed: Any, staged: Any) -> tuple[dict[int, Any], dict[int, Any]]:
        """Which warps and which stages a tiling's footprint allows (numbers, or arrays over many tilings): the one
        rule of `_offer` and of the counts `_measure` keeps. A loop of one iteration offers only TRITON_STAGES."""
        smem = self.target.smem_per_block
        return ({w: (32 * w <= numel) | (w == 1) for w in WARPS},
                {s: fixed + staged * staged_copies(s) <= smem for s in {*STAGE_VALUES, TRITON_STAGES}})

    def launches(self, grid: Sequence[int], loop: int) -> list[tuple[int, int, bool]]:
        """The valid (warps, stages, gemv) of a valid (grid, loop) (computed once per tiling)."""
        return list(self._offer(tuple(grid), loop))

    def n_launches(self, grid: Sequence[int], loop: int) -> int:
        """len(launches(grid, loop)), without listing them (counted with the tiling's footprint)."""
        key = (tuple(grid), loop)
        if key not in self._counts:
            self._measure([key])
        return self._counts[key]

    def _offer(self, grid: tuple[int, ...], loop: int) -> tuple[tuple[int, int, bool], ...]:
        """The launches a valid tiling offers: each warps and stages its footprint allows with Triton's dot, then
        with products as multiplies and sums where it offers a GEMV (no dot: no shared memory staged; computed
        once)."""
        key = (grid, loop)
        if key not in self._launches:
            warps, stages = self._offered(*self._tiles(grid, loop))   # what `footprint` reads, not one per stage
            depths = STAGE_VALUES if loop > 1 else (TRITON_STAGES,)
            out = [(w, s, False) for w in WARPS if warps[w] for s in depths if stages[s]]
            g_warps = self._gemv_warps(self._gemv[key])
            out += [(w, s, True) for w in WARPS if g_warps[w] for s in depths]
            self._launches[key] = tuple(out)
        return self._launches[key]

    def violations(self, grid: Sequence[int], loop: int, warps: int = 0, stages: int = 0,
                   gemv: bool = False) -> list[str]:
        """Every constraint (grid, loop, warps, stages, gemv) breaks, in words; [] when the point is valid. Warps
        and stages 0 ask about the tiling alone: valid when some launch of it is (shared memory is checked at
        the fewest stages offered)."""
        grid = tuple(grid)
        if len(grid) != self.n_grid:
            return [f"{self.n_grid} grid size(s) expected, got {grid}"]
        if any(not isinstance(v, int) or v < 1 for v in (*grid, loop)):
            return [f"sizes must be positive ints, got grid {grid} loop {loop!r}"]
        out = []
        if warps and warps not in WARPS:
            out.append(f"warps={warps!r} is not one of {WARPS}")
        if stages and stages not in STAGE_VALUES:
            out.append(f"stages={stages!r} is not one of {STAGE_VALUES}")
        elif stages and loop == 1 and stages != TRITON_STAGES:
            out.append(f"stages={stages} with a loop of one iteration: only Triton's default "
                       f"({TRITON_STAGES}) is a point")
        for var, v in zip(self.variables, (*grid, loop)):
            if not var.classes and v != 1:
                out.append(f"{var.name} splits no dim, so it must be 1 (got {v})")
        for e, p, looped, even in self._splits:
            why = _uneven(e, grid[p] if p is not None else 1, loop if looped else 1, even)
            if why:
                out.append(why)
        if out:
            return out
        out += self.broken(grid, loop)
        fp = self.footprint(grid, loop, stages or min(STAGE_VALUES))
        most = self._gemv[(grid, loop)] if gemv else fp.max_numel
        if gemv and not most:
            out.append(f"a GEMV launch needs every matmul at most {GEMV_ROWS} rows")
        elif warps > 1 and 32 * warps > most:
            out.append(f"{warps} warps for tiles of at most {most} elements: some threads would have no lane")
        elif gemv and most > GEMV_PER_THREAD * 32 * (warps or max(WARPS)):
            out.append(f"a GEMV's product of {most} elements at {warps or max(WARPS)} warps: over {GEMV_PER_THREAD} "
                       "a thread")
        t = self.target
        if fp.blocks > t.max_blocks:
            out.append(f"{fp.blocks} blocks > the cap of {t.max_blocks}")
        if any(g > t.max_grid_yz for g in grid[1:]):
            out.append(f"grid {grid}: y and z are limited to {t.max_grid_yz}")
        if fp.max_numel > MAX_NUMEL:
            out.append(f"a tile of {fp.max_numel} elements > Triton's {MAX_NUMEL}")
        if fp.smem > t.smem_per_block and not gemv:   # a GEMV stages no dot operands
            out.append(f"~{fp.smem} B of shared memory > {t.smem_per_block} B per block")
        return out

    def valid(self, grid: Sequence[int], loop: int, warps: int = 0, stages: int = 0, gemv: bool = False) -> bool:
        return not self.violations(grid, loop, warps, stages, gemv)

    # -- all points -----------------------------------------------------------------------------

    def tilings(self) -> list[tuple[tuple[int, ...], int]]:
        """Every valid (grid, loop), in lexicographic order: each fixes every tile shape (computed once). None
        where the sGraph's later kernel cannot sum its groups at these shapes (`_groups_fit`)."""
        if self._tilings is None and not self._groups_fit():
            self._tilings = []
        if self._tilings is None:
            # The product of every variable's values can be large (QK-Attention: 250,000 per config over its
            # 1018 sGraphs), so the tile rules are applied per variable before the product: given the loop
            # range, a grid value is kept when every class it splits gets power-of-two tiles. What
            # is left needs only the rules of the whole point (`violations` states them all; a test holds
            # the two equal).
            t = self.target
            even = []
            for loop in self.variables[-1].values:
                if not self._splits_evenly(None, 1, loop):
                    continue
                values = [[v for v in var.values if self._splits_evenly(p, v, loop)]
                          for p, var in enumerate(self.variables[:-1])]
                even += [(grid, loop) for grid in itertools.product(*values)
                         if math.prod(grid) <= t.max_blocks and all(g <= t.max_grid_yz for g in grid[1:])]
            self._measure(even)
            least = staged_copies(min(STAGE_VALUES))
            self._tilings = sorted(key for key in even if (fp := self._footprints[key])[0] <= MAX_NUMEL
                                   and fp[1] + fp[2] * least <= t.smem_per_block and not self.broken(*key))
        return list(self._tilings)

    def found(self, tilings: Sequence[tuple[Sequence[int], int]]) -> None:
        """Take `tilings` as this sGraph's (`graph_tilings` found them in a worker, from the same sGraph), their
        footprints measured here at once: `_tiles` would measure QK-Attention's 780,000 one at a time."""
        self._tilings = [(tuple(grid), loop) for grid, loop in tilings]
        if self._tilings:
            self._measure(self._tilings)

    def _groups_fit(self) -> bool:
        """Whether a partials form's second kernel can sum the splits' tiles at these shapes: a group op in a
        kernel sums groups of a power-of-two size only (prism.codegen.render: the padded tile must split into
        whole groups), and a group there is one split's share of the program's width along the dim the
        partials lie side by side in (prism.symbolic.structure.instantiate). A group mapping's groups are GROUP
        wide whatever the shapes; a walk mapping's loop sums the splits with no group op."""
        m, st = self.mapping, self.sgraph.structure
        if not m.partials or m.walk or m.group:
            return True
        for o, fold in zip(st.outputs, st.problem().partials(m) or ()):
            for d in fold.values():
                a = st.graph.dims[o][d]
                if a != UNIT and not _pow2(self.extent[st.graph.uf.find(a)]):
                    return False
        return True

    def _splits_evenly(self, p: int | None, value: int, loop: int) -> bool:
        """Whether grid dim p at `value` (p None: no grid dim, the loop alone) and the loop at `loop` split every
        class that grid dim p splits into tiles the rules allow (`_uneven`)."""
        return not any(_uneven(e, value, loop if looped else 1, even) for e, q, looped, even in self._splits
                       if q == p)

    def points(self) -> list[Candidate]:
        """Every valid candidate of this sGraph: each valid (grid, loop) at each of its launches."""
        return [Candidate(self.index, grid, loop, *launch) for grid, loop in self.tilings()
                for launch in self.launches(grid, loop)]

    def neighbours(self, c: Candidate) -> list[Candidate]:
        """The valid points one step from `c`: one parallel size to the next or previous of its values,
        warps halved or doubled, stages one less or more (a default launch counts as 4 warps, 3 stages), the
        products the other way (dot or GEMV)."""
        warps, stages = c.warps or 4, c.stages or TRITON_STAGES
        sizes = [*c.grid, c.loop]
        moves = [(way[0], warps, stages, c.gemv) for way in self._ways(sizes)]
        moves += [(sizes, w, stages, c.gemv) for w in (warps // 2, warps * 2) if w in WARPS]
        moves += [(sizes, warps, s, c.gemv) for s in (stages - 1, stages + 1) if s in STAGE_VALUES]
        moves += [(sizes, warps, stages, not c.gemv)]
        out: list[Candidate] = []
        for moved, w, s, gemv in moves:
            n = Candidate(c.graph, tuple(moved[:-1]), moved[-1], w, s if moved[-1] > 1 else TRITON_STAGES, gemv)
            if n != c and n not in out and self.valid(n.grid, n.loop, n.warps, n.stages, n.gemv):
                out.append(n)
        return out

    def adjacent(self, grid: tuple[int, ...], loop: int) -> list[tuple[tuple[int, ...], int]]:
        """The tilings nearest (grid, loop) along each parallel size, one each way: the next value of that size
        that makes a valid tiling with the others unchanged (the next value itself can break a tile rule that
        the one after keeps)."""
        if self._valid is None:
            self._valid = set(self.tilings())
        out = []
        for way in self._ways([*grid, loop]):
            key = next(((tuple(s[:-1]), s[-1]) for s in way if (tuple(s[:-1]), s[-1]) in self._valid), None)
            if key is not None:
                out.append(key)
        return out

    def _ways(self, sizes: list[int]) -> Iterator[list[list[int]]]:
        """Per parallel size and direction (down, up): the sizes with that one moved to each of its values
        that way, nearest first (none where it is at its end)."""
        for k, var in enumerate(self.variables):
            if sizes[k] in var.values:
                i = var.values.index(sizes[k])
                for way in (var.values[i - 1::-1] if i else (), var.values[i + 1:]):
                    if way:
                        yield [sizes[:k] + [v] + sizes[k + 1:] for v in way]

    def describe(self) -> str:
        return ", ".join(f"{v.name} ∈ {{{', '.join(map(str, v.values))}}}" for v in self.variables)


class Space:
    """All (graph, grid, loop, warps, stages) points of a search result's sGraphs for one program config."""

    def __init__(self, result, program: KernelGraph | Sequence[Sequence[int]], target: Target = H100,
                 dtype: str | None = None, strides: Sequence[Sequence[int]] | None = None) -> None:
        inputs = program.inputs if isinstance(program, KernelGraph) else result.program.inputs
        shapes = [t.shape for t in program.inputs] if isinstance(program, KernelGraph) else [tuple(s) for s in program]
        self.result, self.program, self.target = result, program, target
        self.strides = strides
        """The strides the program's inputs are passed with (None: row-major): the layout the cost model reads
        them in (prism.options.TuneOptions.strides)."""
        self.shapes, self.dtype = shapes, dtype or inputs[0].dtype
        self.names = [t.name for t in inputs]
        """The program's input names, which instantiated candidates take (the searched program's, given shapes)."""
        self.graphs = [GraphSpace(g, shapes, self.dtype, target, i) for i, g in enumerate(result.graphs)]
        self._tilings: list[tuple[GraphSpace, tuple[int, ...], int]] | None = None
        self._ends: list[int] = []   # cumulative points per tiling

    def form(self, graph: int, grid: Sequence[int] | None = None) -> str:
        """The form of sGraph `graph` (prism.search.result.SymbolicGraph.form: fused, atomic sums, partials, ...);
        at `grid`, a split-K sGraph with one block along each dim that sums is "fused": it sums nothing, so the
        tuner's slot for its form is held by a point that splits."""
        g = self.result.graphs[graph]
        if grid is not None and g.summing and all(grid[i] == 1 for i in g.summing):
            return "fused"
        return g.form

    def tilings(self, mapper: Callable[[Callable[..., Any], Sequence[tuple]], list[Any]] | None = None,
                ) -> list[tuple[GraphSpace, tuple[int, ...], int]]:
        """Every valid (sGraph, grid, loop), graph by graph (computed once). `mapper` (map(fn, tasks), as
        prism.tune.rank takes it): a space of at least PARALLEL_GRAPHS sGraphs finds them on its workers."""
        if self._tilings is None and mapper is not None and len(self.graphs) >= PARALLEL_GRAPHS:
            chunks = -(-len(self.graphs) // GRAPHS_PER_TASK)
            tasks = [({gs.index: gs.sgraph.to_json() for gs in self.graphs[k::chunks]}, self.shapes, self.dtype,
                      self.target) for k in range(chunks)]     # interleaved: the costly sGraphs sit together
            for found in mapper(graph_tilings, tasks):
                for i, tilings in found.items():
                    self.graphs[i].found(tilings)
        return list(self._all())

    def _all(self) -> list[tuple[GraphSpace, tuple[int, ...], int]]:
        """The tilings themselves (not a copy), and `_ends`, computed the first time."""
        if self._tilings is None:
            self._tilings = [(gs, grid, loop) for gs in self.graphs for grid, loop in gs.tilings()]
            self._ends = list(itertools.accumulate(gs.n_launches(grid, loop) for gs, grid, loop in self._tilings))
        return self._tilings

    def point(self, i: int) -> Candidate:
        """The i-th point in `points()` order, found without listing the points (a space can have millions)."""
        t = bisect.bisect_right(self._ends, i) if self._all() else 0
        gs, grid, loop = self._tilings[t]
        return Candidate(gs.index, grid, loop, *gs.launches(grid, loop)[i - (self._ends[t - 1] if t else 0)])

    def points(self) -> list[Candidate]:
        """Every valid candidate, graph by graph."""
        return [Candidate(gs.index, grid, loop, *launch) for gs, grid, loop in self.tilings()
                for launch in gs.launches(grid, loop)]

    def __len__(self) -> int:
        self._all()
        return self._ends[-1] if self._ends else 0

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.points())

    def sizes(self) -> list[int]:
        """Points per sGraph."""
        counts = [0] * len(self.graphs)
        for gs, grid, loop in self.tilings():
            counts[gs.index] += gs.n_launches(grid, loop)
        return counts

    def shuffled(self, seed: int = 0) -> Iterator[Candidate]:
        """Every point once, in a uniformly random order that the seed fixes. Indices are drawn lazily (a
        tuner takes a handful of a space that can have millions of points), the last half by one shuffle."""
        n, rng, seen = len(self), random.Random(seed), set()
        while len(seen) < n // 2:
            i = rng.randrange(n)
            if i not in seen:
                seen.add(i)
                yield self.point(i)
        rest = [i for i in range(n) if i not in seen]
        rng.shuffle(rest)
        yield from map(self.point, rest)

    def sample(self, k: int, seed: int = 0) -> list[Candidate]:
        """k distinct candidates drawn uniformly over all (graph, params) pairs (all of them if fewer), in
        `points()` order; the same seed gives the same draw."""
        return sorted(itertools.islice(self.shuffled(seed), k))

    def violations(self, c: Candidate) -> list[str]:
        return self.graphs[c.graph].violations(c.grid, c.loop, c.warps, c.stages, c.gemv)

    def neighbours(self, c: Candidate) -> list[Candidate]:
        return self.graphs[c.graph].neighbours(c)

    def instantiate(self, c: Candidate) -> KernelGraph:
        """The concrete µGraph of a candidate (the program's input names and dtype), every block graph of it
        compiled with the candidate's launch."""
        return instantiate(self.result.graphs[c.graph], self.shapes, self.dtype, self.names, c)


def instantiate(sgraph, shapes: Sequence[Sequence[int]], dtype: str, names: Sequence[str], c: Candidate) -> KernelGraph:
    """Candidate `c` of `sgraph` (a SymbolicGraph) as a concrete µGraph with these inputs, every block graph
    of it compiled with the candidate's warps and stages (a tail kernel stays one: its mapping says so). A
    point the space does not hold raises MappingError."""
    g = sgraph.instantiate(shapes, c.grid, c.loop, dtype, names)
    for _, node in g.topo():
        if node.op == "custom":
            block = node.attrs["block"]
            block.launch = replace(c.launch, tail=block.launch.tail)
    return g


def located(graphs: Sequence[Any], identity: str, label: str) -> Candidate | None:
    """A stored point (its sGraph's `identity`, prism.search.result.SymbolicGraph.identity, and its `label`, as
    `Candidate.__str__` wrote it) at the index that sGraph has among `graphs`: another search numbers its sGraphs
    its own way. None where none of them is that sGraph; ValueError where `label` is not a candidate."""
    point = Candidate.parse(label)
    index = next((i for i, g in enumerate(graphs) if g.identity == identity), None)
    return None if index is None else replace(point, graph=index)


PARALLEL_GRAPHS = 256
"""Where a search result has at least this many sGraphs, `Space.tilings` finds their tilings on the tuning's
workers. An sGraph proved under size constraints instantiates its µGraph once per grid to read its later
kernels' sizes (`GraphSpace.broken`): QK-Attention's 2572 sGraphs took 35 s of the H200 host's 55 s of tuning
a config in one process (the `space` and `total` seconds of its rows' reports in
benchmarks/results/gpu_bench_h200_2026-11-27_a.json)."""
GRAPHS_PER_TASK = 32


def graph_tilings(docs: dict[int, dict], shapes: Sequence[Sequence[int]], dtype: str,
                  target: Target) -> dict[int, list[tuple[tuple[int, ...], int]]]:
    """GraphSpace.tilings of each sGraph of `docs` (its index in the search result: its JSON) at `shapes`.
    Runs in a worker: everything comes as JSON or plain values."""
    from prism.search.result import SymbolicGraph

    return {i: GraphSpace(SymbolicGraph.from_json(doc), shapes, dtype, target, i).tilings() for i, doc in docs.items()}
