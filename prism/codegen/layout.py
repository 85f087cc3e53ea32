"""Tile layout of a block graph: which tile dims are the same dim, the power-of-two block of each, and
which lanes of it are real.

Triton blocks have power-of-two sizes and `tl.dot` needs every dim of at least 16, while µGraph tiles
have any size. So tile dims that must agree (an elementwise op's operand and result, a matmul's inner
dims, an accumulator and its tile) are unified into one `TileDim`, whose block is the next power of
two of its size, at least 16 where a matmul uses it. Lanes past the tile size are padding: loads fill
them with zeros, stores and reductions mask them out.

A dim of extent E split f ways into tiles of t with f · t > E (a *ragged* split, prism.ir.block.split: the
last tile partial) has lanes that are real in one block or iteration and not in another: lane j of tile
k is real when its global index k · t + j < E. Such a TileDim knows E, the grid dim and whether the
loop split it, so its mask compares the global index with E (in the loop for a dim the loop walks).

Why a ragged kernel computes the program. The verifier proves the µGraph equal to the program for all
parallel sizes that split evenly, so in particular at extent f · t: on inputs padded to f · t along the
dim. Take the padding to be an element ⊥ that every op of the program propagates (op(⊥, x) = ⊥, so only
padded output positions hold ⊥) and every reduction skips (it is the identity of sum and max, and of a
matmul's contraction): then the padded program equals the program on the real positions, since each
output position is an elementwise function of the same positions of its operands, or a reduction over
real positions only. The proof's axioms (part/comb/red/repl, reductions regrouped over tiles, iterations
and blocks) hold for every value, ⊥ included, so the µGraph computes that too. The kernel realises ⊥
where it matters, and only there: a reduction over a masked dim (sum, max, a matmul's K, a row max before
a running max) first sets the lanes that are not real to its identity (0 for a sum or a contraction,
-inf for a max, so exp of a padded logit is 0 and an online softmax's max and sums do not move); a store
writes real lanes only; every other lane may hold anything (exp(0) = 1, 0/0) because nothing real reads it.
The padding may fill whole tiles: where the loop walks the dim, the last block's later iterations may lie wholly
past E (fewer tiles than the loop and the blocks, prism.ir.block.split). Such an iteration's reductions give their identities, so its
accumulators and running max do not move. What a block holds after its loop (a running max, its partials, which
other blocks' are combined with) is of real elements, because the rule keeps a real tile in every block: a block
of nothing would end with a running max of -inf and partials exp(-inf - -inf) = NaN, which no combine undoes
(tests/codegen/test_ragged.py drops the rule and sees the NaN).
A value carried across the loop (an accumulator, a running max) never keeps a dim the loop splits
raggedly (the tuner's space keeps those splits even; emit refuses), so its lanes are real in every
iteration. The reference executor computes the same thing on short tiles (prism.ir.kinds). Tests make
mutants of these rules (a 0 pad before a max, a store without its mask, a mask of the lane instead of the
global index) and see them caught (tests/codegen/test_ragged.py).

Runtime sizes. A dim of dynamic size (`sizes`: an input dim the caller names) keeps its tile t, and its extent
E becomes a kernel argument: the kernel generated at one E runs at any other. Its tiles are counted at launch,
n = cdiv(E, t), by whichever parallel size splits it: the loop (its trip count), or a grid dim (its blocks);
split by nothing, its one tile is its whole block, so any E up to the block fits. Tile k then holds global
indices k · t + lane for k < n, and the masks above compare them with the argument E. The argument above
carries over unchanged, at each E: the kernel is the µGraph split into n tiles of t, the last partial, on the
program padded with ⊥, because every tile k < n holds at least one real index (k · t ≤ (n - 1) · t < E), so
every iteration and every block computes on real lanes as before. That is why only these splits are allowed
(CodegenError otherwise, and the caller keeps kernels per size): a dim split by a grid dim and the loop at once,
or by a grid dim whose blocks an output sums or keeps apart along another dim (split-KV partials), would let a
block hold no real index at all when E is small, and an online softmax over nothing has a running max of -inf,
exp(-inf - -inf) = NaN (neutral empty blocks are future work). A grid dim or the loop that splits a dim of
runtime size must split nothing else, else its count, right for that dim, would be wrong for another; a group
op over it would need its group count, a mean its 1/E (render refuses both, as for a ragged dim). What codegen
cannot see is a constant of the block graph computed from a size (a mean's 1/E folded into a scalar): the
caller must check that the kernels generated at two sizes are the same code (prism.runtime.buckets does).
Mutants that count wrong (an extent one short, a trip count or a grid rounded down) are caught by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from prism.codegen.spec import unique
from prism.errors import CodegenError
from prism.ir.block import BlockGraph, next_pow2
from prism.ir.kinds import COMPUTE, LOADER, SAVER, kind_of
from prism.ir.ops import OPS, Shape

__all__ = ["MIN_DOT", "TileDim", "Layout", "Padded"]

MIN_DOT = 16
"""The smallest M, N and K `tl.dot` compiles for (fp16/fp32 operands on sm_80+)."""


@dataclass(frozen=True)
class TileDim:
    """One tile dim: `tile` real lanes padded to `block`; `name` gives its constexprs (BLOCK_X0, TILE_X0,
    EXTENT_X0). A ragged dim's `extent` is the whole dim's (0: not ragged), split by grid dim `grid` (or
    None) and, if `looped`, by the loop: tile k (pid · LOOP + i, or pid, or i) holds global indices k · tile
    + lane, real when less than the extent. A dim of runtime size `size` (a dynamic size's name) is ragged with
    an extent known only at launch: EXTENT_X0 is then an argument, and the tiles the grid dim or the loop
    splits it into are counted at launch (`extent` is the one it was generated at)."""

    name: str
    tile: int
    block: int
    extent: int = 0
    grid: str | None = None
    looped: bool = False
    size: str | None = None

    @property
    def padded(self) -> bool:
        """Lanes past the tile: never real."""
        return self.block > self.tile

    @property
    def ragged(self) -> bool:
        """Its last tile is partial: which lanes are real depends on the block and the iteration."""
        return self.extent > 0

    @property
    def masked(self) -> bool:
        """Some lane may not be real (padded or ragged): loads, stores and reductions mask it."""
        return self.padded or self.ragged

    @property
    def runtime(self) -> bool:
        """Its extent is a kernel argument, known at launch."""
        return self.size is not None

    @property
    def block_expr(self) -> str:
        return "1" if self.block == 1 else f"BLOCK_{self.name}"

    @property
    def tile_expr(self) -> str:
        return f"TILE_{self.name}" if self.padded else self.block_expr


class _Classes:
    """Union-find over tile-dim slots (node index, dim)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(self, s: tuple[int, int]) -> tuple[int, int]:
        parent = self.parent
        p = parent.setdefault(s, s)
        while p != s:                   # path halving
            parent[s] = s = parent[p]
            p = parent[s]
        return s

    def union(self, a: tuple[int, int], b: tuple[int, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def roots(self) -> dict[tuple[int, int], tuple[int, int]]:
        """Every slot's class root, once the unions are done: read as a dict, not found again (the cost model
        makes a Layout for every tiling it ranks)."""
        return {s: self.find(s) for s in list(self.parent)}


def _classes(block: BlockGraph) -> tuple[dict[int, tuple[int, ...]], dict[tuple[int, int], tuple[int, int]],
                                         set[tuple[int, int]]]:
    """The tile-dim classes of `block`: each node's tile shape (a saver's: the tile it saves), each slot's class
    root, and the classes a Triton dot contracts or produces (padded to MIN_DOT at least; none in a GEMV launch,
    whose products are a multiply and a sum: prism.ir.Launch)."""
    uf = _Classes()
    dot_dims: set[tuple[int, int]] = set()
    shape = {i: n.outputs[0].shape for i, n in block.topo()}
    for i, node in block.topo():
        rank = len(shape[i])
        for d in range(rank):
            uf.find((i, d))
        kind = kind_of(node)
        if kind is SAVER:                                        # the tile it saves
            shape[i] = shape[node.inputs[0][0]]
        srcs = [r[0] for r in node.inputs]
        family = OPS[node.op].family if kind is COMPUTE else None   # an accumulator keeps its tile
        if family is not None and family.contraction:
            a, b = srcs
            for d in range(rank - 2):                            # batch dims
                uf.union((i, d), (a, d)), uf.union((i, d), (b, d))
            uf.union((i, rank - 2), (a, rank - 2))               # M
            uf.union((i, rank - 1), (b, rank - 1))               # N
            uf.union((a, rank - 1), (b, rank - 2))               # K
            dot_dims |= {(i, rank - 2), (i, rank - 1), (a, rank - 1)}
        else:                                                    # a loader has no operands
            for s in srcs:
                for d in range(rank):
                    if family is not None and family.rule is Shape.REDUCE and d == node.attrs["dim"]:
                        continue
                    if shape[s][d] == shape[i][d]:               # broadcast dims stay apart
                        uf.union((i, d), (s, d))
    root_of = uf.roots()
    return shape, root_of, set() if block.launch.gemv else {root_of[s] for s in dot_dims}


def _block_size(size: int, dot: bool) -> int:
    """The padded extent of a tile dim of `size`: a power of two, at least MIN_DOT where a dot uses it."""
    return max(next_pow2(size), MIN_DOT) if dot else next_pow2(size)


class Padded:
    """Each node's padded tile shape, as `Layout.shape` gives it, without naming the tile dims: what the cost
    model reads of a layout, for every tiling it ranks (naming the dims is work it does not need). It refuses what a
    Layout refuses of a block without runtime sizes (ragged splits that disagree)."""

    def __init__(self, block: BlockGraph) -> None:
        shape, root_of, dots = _classes(block)
        _ragged(block, shape, root_of, {})
        self.shapes = {i: tuple(_block_size(n, root_of[i, d] in dots) for d, n in enumerate(s))
                       for i, s in shape.items()}

    def shape(self, i: int) -> tuple[int, ...]:
        """The padded block shape of node i's tile."""
        return self.shapes[i]


class Layout:
    """`dims[i]`: the TileDims of node i's tile (a saver's are those of the tile it saves).

    `base_names[k]` names loader k's tensor (used to name its dims: X0, X1, ...). `sizes` maps (loader index,
    data dim) to the name of a dynamic size: the classes of those dims have runtime extents (TileDim.size).
    """

    def __init__(self, block: BlockGraph, base_names: list[str],
                 sizes: Mapping[tuple[int, int], str] | None = None) -> None:
        shape, root_of, bumped = _classes(block)
        # name each class after its first loader dim (X0, W1, ...), else after its first node (T5_1)
        namer: dict[tuple[int, int], tuple[int, int]] = {}
        for i, node in sorted(block.topo(), key=lambda item: kind_of(item[1]) is not LOADER):
            for d in range(len(shape[i])):
                namer.setdefault(root_of[i, d], (i, d))
        ragged = _ragged(block, shape, root_of, sizes or {})
        self.dims: dict[int, tuple[TileDim, ...]] = {}
        roots: dict[tuple[int, int], TileDim] = {}
        used: set[str] = set()
        for i, node in block.topo():
            out = []
            for d, size in enumerate(shape[i]):
                root = root_of[i, d]
                if root not in roots:
                    at, dim = namer[root]
                    owner = block.nodes[at]
                    base = base_names[owner.attrs["index"]] if kind_of(owner) is LOADER else f"t{at}_"
                    block_size = _block_size(size, root in bumped)
                    sep = "_" if base[-1].isdigit() else ""
                    split = ragged.get(root, ())
                    whole = len(split) == 4 and split[1] is None and not split[2]   # a runtime size split by nothing
                    roots[root] = TileDim(unique(f"{base.upper()}{sep}{dim}", used), block_size if whole else size,
                                          block_size, *split)
                tdim = roots[root]
                assert tdim.tile == size or tdim.runtime, f"tile dim {tdim.name} has sizes {tdim.tile} and {size}"
                out.append(tdim)
            self.dims[i] = tuple(out)
        self.classes: list[TileDim] = list(roots.values())
        for i, node in block.topo():
            if kind_of(node) is COMPUTE and OPS[node.op].family.rule in (Shape.GROUP, Shape.GROUP_SCALE) \
                    and self.dims[node.inputs[0][0]][node.attrs["dim"]].runtime:
                raise CodegenError(f"{block.label((i, 0))} groups a dim of runtime size: its groups are counted "
                                   "when the kernel is generated")

    def tile_dim(self, name: str) -> TileDim:
        """The tile dim called `name`."""
        return next(t for t in self.classes if t.name == name)

    def shape(self, i: int) -> tuple[int, ...]:
        """The padded block shape of node i's tile."""
        return tuple(t.block for t in self.dims[i])

    def shape_expr(self, i: int) -> str:
        """`(BLOCK_X0, BLOCK_W1)`: the block shape as Triton source."""
        dims = [t.block_expr for t in self.dims[i]]
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _ragged(block: BlockGraph, shape: dict[int, tuple[int, ...]], root_of: Mapping[tuple[int, int], tuple[int, int]],
            sizes: Mapping[tuple[int, int], str]) -> dict[tuple[int, int], tuple]:
    """Per tile-dim class split raggedly by a loader or saver, or of a runtime size (`sizes`: (loader index, dim)
    -> size name): (extent, grid dim or None, looped, size name or None). CodegenError where a runtime size's
    tiles could not be counted at launch (module docstring)."""
    out: dict[tuple[int, int], tuple] = {}
    ways: dict[tuple[int, int], set[tuple[tuple[str, ...], bool]]] = {}
    named: dict[tuple[int, int], tuple[str, int]] = {}
    for i, node in block.topo():
        kind = kind_of(node)
        if kind is LOADER:
            full, maps, fmap = block.input_types[node.attrs["index"]].shape, node.attrs["imap"], node.attrs["fmap"]
        elif kind is SAVER:
            full, maps, fmap = node.outputs[0].shape, node.attrs["omap"], None
        else:
            continue
        for d, tile in enumerate(shape[i]):
            root = root_of[i, d]
            grids = tuple(g for g, dd in maps.items() if dd == d and block.grid_size(g) > 1)
            looped = fmap == d and block.loop > 1
            ways.setdefault(root, set()).add((grids, looped))
            if kind is LOADER and (node.attrs["index"], d) in sizes:
                named.setdefault(root, (sizes[(node.attrs["index"], d)], full[d]))
            parts = (block.grid_size(grids[0]) if grids else 1) * (block.loop if looped else 1)
            if tile * parts == full[d]:
                continue
            split = (full[d], grids[0] if grids else None, looped)
            if out.setdefault(root, split) != split:
                raise CodegenError(f"tile dim {d} of {block.label((i, 0))} is split raggedly as {split}, "
                                   f"but a dim it is unified with as {out[root]}")
    for root, (size, extent) in named.items():
        if len(ways[root]) > 1:
            raise CodegenError(f"a dim of runtime size {size!r} is split in several ways ({sorted(ways[root])}): "
                               "its tiles cannot be counted from its extent alone")
        ((grids, looped),) = ways[root]
        if len(grids) + looped > 1:
            by = " and ".join(grids + ("the loop",) * looped)
            raise CodegenError(f"a dim of runtime size {size!r} is split by {by}: some blocks or iterations could "
                               "hold no real element")
        out[root] = (extent, grids[0] if grids else None, looped, size)
    _counted_at_launch(block, shape, ways, named)
    return out


def _counted_at_launch(block: BlockGraph, shape: dict[int, tuple[int, ...]],
                       ways: dict[tuple[int, int], set[tuple[tuple[str, ...], bool]]],
                       named: dict[tuple[int, int], tuple[str, int]]) -> None:
    """CodegenError unless each grid dim or loop that splits a dim of runtime size splits only dims of that size
    into tiles of one extent (its count, cdiv(extent, tile), is then right for all of them), and every output
    keeps the blocks of such a grid dim apart (omap), so that no block's tile is summed with another's."""
    parallel = [g for g in block.grid_dims if block.grid_size(g) > 1] + (["loop"] if block.loop > 1 else [])
    for var in parallel:
        split = [r for r, w in ways.items() if any(looped if var == "loop" else var in grids for grids, looped in w)]
        counts = {(named[r][0], shape[r[0]][r[1]]) if r in named else None for r in split}
        if not any(counts):
            continue
        what = "the loop" if var == "loop" else f"grid dim {var}"
        if len(counts) > 1:
            raise CodegenError(f"{what} splits a dim of runtime size and other dims ({sorted(map(str, counts))}): "
                               "its count, known at launch, would not fit them all")
        summed = [k for k in range(len(block.savers)) if var in block.summed(k)]
        if summed:
            raise CodegenError(f"output {summed[0]} sums the blocks of {what}, which splits a dim of runtime size: "
                               "blocks past the extent would be summed in (future work)")
