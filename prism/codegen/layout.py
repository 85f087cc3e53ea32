"""Tile layout of a block graph: which tile dims are the same dim, and the power-of-two block of each.

Triton blocks have power-of-two sizes and `tl.dot` needs every dim of at least 16, while µGraph tiles
have any size. So tile dims that must agree (an elementwise op's operand and result, a matmul's inner
dims, an accumulator and its tile) are unified into one `TileDim`, whose block is the next power of
two of its size, at least 16 where a matmul uses it. Lanes past the tile size are padding: loads fill
them with zeros, stores and reductions mask them out.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """One tile dim: `tile` real lanes padded to `block`; `name` gives its constexprs (BLOCK_X0, TILE_X0)."""

    name: str
    tile: int
    block: int

    @property
    def padded(self) -> bool:
        return self.block > self.tile

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
                    roots[root] = TileDim(unique(f"{base.upper()}{sep}{dim}", used), size, block_size)
                tdim = roots[root]
                assert tdim.tile == size, f"tile dim {tdim.name} has sizes {tdim.tile} and {size}"
                out.append(tdim)
            self.dims[i] = tuple(out)
        self.classes: list[TileDim] = list(roots.values())

    def shape(self, i: int) -> tuple[int, ...]:
        """The padded block shape of node i's tile."""
        return tuple(t.block for t in self.dims[i])

    def shape_expr(self, i: int) -> str:
        """`(BLOCK_X0, BLOCK_W1)`: the block shape as Triton source."""
        dims = [t.block_expr for t in self.dims[i]]
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
