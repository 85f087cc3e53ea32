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
A value carried across the loop (an accumulator, a running max) never keeps a dim the loop splits
raggedly (the tuner's space keeps those splits even; emit refuses), so its lanes are real in every
iteration. The reference executor computes the same thing on short tiles (prism.ir.kinds). Tests make
mutants of these rules (a 0 pad before a max, a store without its mask, a mask of the lane instead of the
global index) and see them caught (tests/codegen/test_ragged.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from prism.codegen.errors import CodegenError
from prism.codegen.spec import unique
from prism.ir.block import BlockGraph
from prism.ir.kinds import COMPUTE, LOADER, SAVER, kind_of
from prism.ir.ops import OPS

__all__ = ["MIN_DOT", "TileDim", "Layout", "next_pow2"]

MIN_DOT = 16
"""The smallest M, N and K `tl.dot` compiles for (fp16/fp32 operands on sm_80+)."""


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class TileDim:
    """One tile dim: `tile` real lanes padded to `block`; `name` gives its constexprs (BLOCK_X0, TILE_X0,
    EXTENT_X0). A ragged dim's `extent` is the whole dim's (0: not ragged), split by grid dim `grid` (or
    None) and, if `looped`, by the loop: tile k (pid · LOOP + i, or pid, or i) holds global indices k · tile
    + lane, real when less than the extent."""

    name: str
    tile: int
    block: int
    extent: int = 0
    grid: str | None = None
    looped: bool = False

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
        self.parent.setdefault(s, s)
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def union(self, a: tuple[int, int], b: tuple[int, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


class Layout:
    """`dims[i]`: the TileDims of node i's tile (a saver's are those of the tile it saves).

    `base_names[k]` names loader k's tensor (used to name its dims: X0, X1, ...).
    """

    def __init__(self, block: BlockGraph, base_names: list[str]) -> None:
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
            rule = OPS[node.op].family.rule if kind is COMPUTE else "same"   # an accumulator keeps its tile
            if rule == "contract":
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
                        if rule == "reduce" and d == node.attrs["dim"]:
                            continue
                        if shape[s][d] == shape[i][d]:               # broadcast dims stay apart
                            uf.union((i, d), (s, d))
        # name each class after its first loader dim (X0, W1, ...), else after its first node (T5_1)
        namer: dict[tuple[int, int], tuple[int, int]] = {}
        for i, node in sorted(block.topo(), key=lambda item: kind_of(item[1]) is not LOADER):
            for d in range(len(shape[i])):
                namer.setdefault(uf.find((i, d)), (i, d))
        ragged = _ragged(block, shape, uf)
        self.dims: dict[int, tuple[TileDim, ...]] = {}
        roots: dict[tuple[int, int], TileDim] = {}
        bumped = {uf.find(s) for s in dot_dims}
        used: set[str] = set()
        for i, node in block.topo():
            out = []
            for d, size in enumerate(shape[i]):
                root = uf.find((i, d))
                if root not in roots:
                    at, dim = namer[root]
                    owner = block.nodes[at]
                    base = base_names[owner.attrs["index"]] if kind_of(owner) is LOADER else f"t{at}_"
                    block_size = next_pow2(size)
                    if root in bumped:
                        block_size = max(block_size, MIN_DOT)
                    sep = "_" if base[-1].isdigit() else ""
                    roots[root] = TileDim(unique(f"{base.upper()}{sep}{dim}", used), size, block_size,
                                          *ragged.get(root, ()))
                tdim = roots[root]
                assert tdim.tile == size, f"tile dim {tdim.name} has sizes {tdim.tile} and {size}"
                out.append(tdim)
            self.dims[i] = tuple(out)
        self.classes: list[TileDim] = list(roots.values())

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


def _ragged(block: BlockGraph, shape: dict[int, tuple[int, ...]], uf: _Classes) -> dict[tuple[int, int], tuple]:
    """Per tile-dim class split raggedly by a loader or saver: (extent, grid dim or None, looped)."""
    out: dict[tuple[int, int], tuple] = {}
    for i, node in block.topo():
        kind = kind_of(node)
        if kind is LOADER:
            full, maps, fmap = block.input_types[node.attrs["index"]].shape, node.attrs["imap"], node.attrs["fmap"]
        elif kind is SAVER:
            full, maps, fmap = node.outputs[0].shape, node.attrs["omap"], None
        else:
            continue
        for d, tile in enumerate(shape[i]):
            grid = next((g for g, dd in maps.items() if dd == d and block.grid_size(g) > 1), None)
            looped = fmap == d and block.loop > 1
            parts = (block.grid_size(grid) if grid else 1) * (block.loop if looped else 1)
            if tile * parts == full[d]:
                continue
            split = (full[d], grid, looped)
            if out.setdefault(uf.find((i, d)), split) != split:
                raise CodegenError(f"tile dim {d} of {block.label((i, 0))} is split raggedly as {split}, "
                                   f"but a dim it is unified with as {out[uf.find((i, d))]}")
    return out
