"""Streamed contractions: a matmul of two loaded tiles over a long K is computed in chunks of K, in an inner loop.

Why. A µGraph whose every iteration contracts a whole dim holds both operand tiles whole. MoE's fused form
(prism.workloads.moe) contracts all of d in each iteration: X [16, 2048] and W1 [2048, 16] in float16 are 128 KB
per block, which with the [16, 1024] float32 accumulator is more than 256 threads' registers, and every fused MoE
candidate spilled on sm_90 (2.4-5.2 KB stack frames). Triton keeps all of what one `tl.dot` reads on chip at
once, so code generation reads such a contraction as a GEMM's K loop does: CHUNK lanes of K at a time, each
chunk's product added into one float32 tile. Only a chunk of each operand is live, and Triton pipelines the inner
loop's loads.

Which matmuls (`streamed`): a tensor-core matmul (not a GEMV launch's multiply and sum) whose two operands are
loaders read by it alone, whose K is the loaded input's whole dim (split by neither the grid nor the loop, so a
chunk's offset is the same in every block and iteration) and a power of two of at least STREAM_K lanes (no lane
is padding), and whose operand tiles hold at least STREAM_ELEMENTS elements together: smaller ones fit as they
are. The emitter also leaves a K of runtime size alone (its lanes are masked at launch).

Why it computes the matmul. A matmul is a sum over K of products; the inner loop adds the same products, grouped
by chunk, in float32 as `tl.dot` accumulates. Every lane of every chunk is real (K is unpadded and unsplit), the
chunks cover K once (offsets 0, CHUNK, ... below K), and nothing else reads the operand tiles (the rule takes
only loaders this matmul alone reads), so no other node misses them. The µGraph, and so what the verifier
proved, is unchanged: only the order in which one matmul sums its products is code generation's, as the order
of a `tl.dot`'s own K steps already was. Mutants that read one chunk for all, or stop a chunk short, are caught
under the interpreter (tests/codegen/cases.py).

The cost model (prism.tune.cost) counts what is live and staged the same way: a chunk of each operand, and a
loop-invariant operand read again from L2 in every iteration.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from prism.codegen.layout import Layout, TileDim
from prism.codegen.signature import indent
from prism.codegen.spec import TL_DTYPES
from prism.codegen.templates import template
from prism.ir.block import BlockGraph
from prism.ir.kinds import COMPUTE, LOADER, kind_of
from prism.ir.ops import contracts

__all__ = ["CHUNK", "STREAM_ELEMENTS", "STREAM_K", "Streaming", "chunked", "streamed"]

CHUNK = 64
"""Lanes of K per chunk: 128 bytes of a float16 row, the widest load a warp makes at once."""
STREAM_K = 256
"""The shortest K streamed: attention's head dims (64, 128) stay one dot."""
STREAM_ELEMENTS = 16384
"""The fewest operand elements (both tiles, padded) streamed; prism.codegen.emit.default_warps takes 8 warps
from this many loaded elements on, where 4 warps' registers no longer hold them."""


def streamed(block: BlockGraph, shape: Callable[[int], tuple[int, ...]]) -> dict[int, int]:
    """The matmuls of `block` computed in chunks along K, by node index, each with its chunk's K lanes; `shape`
    gives a node's padded tile (prism.codegen.layout)."""
    if block.launch.gemv:
        return {}
    out: dict[int, int] = {}
    uses = None   # found only where a matmul passes the cheaper tests: the cost model asks for every tiling it ranks
    for i, node in enumerate(block.nodes):
        if kind_of(node) is not COMPUTE or not contracts(node.op):
            continue
        (a, _), (b, _) = node.inputs
        rank = len(node.outputs[0].shape)
        if a == b or kind_of(block.nodes[a]) is not LOADER or kind_of(block.nodes[b]) is not LOADER:
            continue
        k = block.nodes[a].outputs[0].shape[rank - 1]
        if k < STREAM_K or k != shape(a)[rank - 1] or k % CHUNK:
            continue
        if not all(_whole(block, o, d) for o, d in ((a, rank - 1), (b, rank - 2))):
            continue
        if math.prod(shape(a)) + math.prod(shape(b)) < STREAM_ELEMENTS:
            continue
        uses = uses or block.consumers()
        if uses.get((a, 0)) == [i] and uses.get((b, 0)) == [i]:
            out[i] = CHUNK
    return out


def _whole(block: BlockGraph, loader: int, d: int) -> bool:
    """Loader `loader`'s tile holds all of its input's dim d."""
    tile = block.nodes[loader].outputs[0].shape
    full = block.input_types[block.nodes[loader].attrs["index"]].shape
    return len(tile) == len(full) and tile[d] == full[d]


def chunked(block: BlockGraph, streams: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Per operand loader of a streamed matmul: (the matmul, which of its tile's dims is K)."""
    out: dict[int, tuple[int, int]] = {}
    for i in streams:
        node = block.nodes[i]
        rank = len(node.outputs[0].shape)
        (a, _), (b, _) = node.inputs
        out[a], out[b] = (i, rank - 1), (i, rank - 2)
    return out


class Streaming:
    """The Emitter's streamed matmuls (`streams`, from `streamed`; their operand loaders `chunked`). It reads the
    Emitter's block graph, layout, schedule, input base names and compute dtype, and writes through its addresses
    (`address`, `walk`), loads (`load_expr`) and dot shapes (`plain`, `folded`, `precision`)."""

    b: BlockGraph
    layout: Layout
    schedule: Mapping[int, str]
    bases: list[str]
    compute: str
    s: Any
    streams: dict[int, int]
    chunked: dict[int, tuple[int, int]]
    fresh: Callable[[str], str]
    lines: Callable[[str], list[str]]
    address: Callable[..., tuple[str, str | None, list[str]]]
    walk: Callable[..., None]
    load_expr: Callable[[int, str, str | None], str]
    plain: Callable[[tuple[TileDim, ...]], bool]
    folded: Callable[[tuple[TileDim, ...]], str]
    precision: Callable[[str], str]

    def stream(self, i: int, folded: bool = False) -> str:
        """Matmul i as a sum over K in chunks (the module docstring says why it is the matmul): an inner loop, in
        the matmul's place, loads a chunk of each operand and adds its product into a float32 tile; returns the
        tile's name, in the matmul's tile shape, or with `folded` in the shape tl.dot takes."""
        node = self.b.nodes[i]
        dims, rank, dtype = self.layout.dims[i], len(node.outputs[0].shape), node.outputs[0].dtype
        chunk = self.chunk_dim(self.layout.dims[node.inputs[0][0]][rank - 1], self.streams[i])
        plain = self.plain(dims)
        total, kk = self.fresh(f"t{i}_sum"), self.fresh("kk")
        body = []
        operands = []
        for o in (r[0] for r in node.inputs):
            attrs, d = self.b.nodes[o].attrs, self.chunked[o][1]
            base, odims = self.bases[attrs["index"]], self.layout.dims[o]
            cdims = tuple(chunk if j == d else t for j, t in enumerate(odims))
            ptrs, mask, strides = self.address(base, cdims, attrs["imap"], attrs["fmap"], self.s.top)
            self.walk(ptrs, cdims, attrs["fmap"], strides)
            name = self.fresh(f"{base}_chunk")
            body.append(f"{name} = {self.load_expr(o, f'{ptrs} + {kk} * {strides[d]}', mask)}")   # in the dot's dtype
            operands.append(name if plain else f"tl.reshape({name}, {self.folded(cdims)})")
        body.append(f"{total} = {template(node.op).format(*operands, extra=f', {total}{self.precision(dtype)}')}")
        self.lines(self.schedule[i]).extend(
            [f"{total} = tl.zeros({self.layout.shape_expr(i) if plain else self.folded(dims)}, "
             f"dtype={TL_DTYPES[self.compute]})",
             f"for {kk} in range(0, {self.layout.dims[node.inputs[0][0]][rank - 1].block_expr}, {chunk.block_expr}):"
             "  # K in chunks (prism.codegen.stream)",
             *indent(body)])
        return total if plain or folded else f"tl.reshape({total}, {self.layout.shape_expr(i)})"

    def chunk_dim(self, k: TileDim, lanes: int) -> TileDim:
        """The tile dim of a chunk of `lanes` of tile dim `k` (BLOCK_<k>C), a layout class of its own so its
        constexpr is named and set like every block's."""
        name = f"{k.name}C"   # class names end in a digit: no other class is called this
        if not any(t.name == name for t in self.layout.classes):
            self.layout.classes.append(TileDim(name, lanes, lanes))
        return self.layout.tile_dim(name)
