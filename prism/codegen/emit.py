"""One block graph (a concrete µGraph) → one `@triton.jit` kernel and its host launcher, as source text.

The kernel reads like the Triton tutorials: program ids, then pointers to each input's first tile, then
the loop (loads, block ops, accumulators, pointer advances), then the ops after the loop, then the
write-back. Each node kind's rule (`EMIT`, keyed by kind) hands its node to the Emitter in one verb (load, op,
accumulate, running_max, store), which it writes where the schedule places the node: a loader's load, an
accumulator's init and update (its combine op's template), a saver's store; ops render through the op table
(prism.codegen.render: a template, or a composite op's decomposition as one expression); this module adds
only what Triton needs around them: dtype conversions and matmul shapes here, addresses and padding masks in
prism.codegen.address, the parameters and the launcher in prism.codegen.signature.
A ragged dim's mask compares each lane's global index with the dim's extent (prism.codegen.layout says why
masked reductions and stores make such a kernel compute the program); for a dim the loop walks it is
computed at the top of every iteration. A dim of runtime size (`sizes`) has its extent as an i32 argument, and
the loop's trip count or the grid dim that splits it is counted at launch (cdiv(extent, tile)) by the launcher,
from the tensors it is given: one compiled kernel serves every extent (`do_not_specialize` keeps Triton from
compiling one per extent that is 1 or a multiple of 16, and from specializing the strides that follow it).

Numerics: loads keep their storage dtype; every op computes in float32 (float64 for float64 graphs);
`tl.dot` gets operands in the matmul's declared dtype (fp16 tensor cores for fp16 graphs; "ieee"
precision for float32) and accumulates in float32. Padded lanes hold garbage after most ops (exp(0)
is 1, 0/0 is NaN), so a reduction over a masked dim (sum, rms_norm, a matmul's K) first zeroes them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from prism.codegen.address import Addressing, along
from prism.codegen.layout import MIN_DOT, Layout, Padded, TileDim
from prism.codegen.render import UNIT, Expr, TritonBuilder, literal, render
from prism.codegen.signature import Signature, indent
from prism.codegen.split import slots, splits
from prism.codegen.spec import MAX_GRID_YZ, RESERVED, SHORT_DTYPES, TL_DTYPES, KernelSpec, Param, base_name, unique
from prism.codegen.stream import Streaming, chunked, streamed
from prism.codegen.templates import template
from prism.errors import CodegenError
from prism.ir.block import BlockGraph
from prism.ir.kinds import (INSIDE, MAX, RUNNING_MAX, Accumulator, Compute, Loader, Online, RunningMax, Saver, kind_of,
                             rule_for)
from prism.ir.ops import OPS, Shape, contracts, rescaling
from prism.ir.printer import format_block

__all__ = ["EMIT", "Emitter", "default_warps", "emit_kernel", "phase", "update"]

MAX_NUMEL = 1 << 20
"""Triton's largest block (elements)."""
_INFIX = re.compile(r"\{0\} ([-+*/]) \{1\}")
"""A combine op's template that is an infix operator on its two operands: its accumulator update reads as an
augmented assignment (`acc += x`)."""

@dataclass
class _Val:
    name: str
    dtype: str
    scope: str
    clean: bool   # padded lanes are known to be zero


@dataclass
class _Scopes:
    top: list[str] = field(default_factory=list)
    pre: list[str] = field(default_factory=list)
    init: list[str] = field(default_factory=list)
    loop: list[str] = field(default_factory=list)
    advance: list[str] = field(default_factory=list)
    post: list[str] = field(default_factory=list)
    store: list[str] = field(default_factory=list)


class Emitter(Addressing, Signature, Streaming):
    """One block graph's kernel, generated line by line: each node kind's rule (`EMIT`) calls one of its verbs
    (load, op, accumulate, running_max, store). Its addresses are Addressing's, its parameters and launcher
    Signature's, a matmul summed over K in chunks Streaming's."""

    def __init__(self, block: BlockGraph, name: str, labels: list[str], in_dtypes: list[str],
                 out_dtypes: list[str], num_warps: int | None,
                 sizes: Mapping[tuple[int, int], str] | None = None, pdl: bool = False) -> None:
        self.b, self.name = block, name
        self.in_dtypes, self.out_dtypes = in_dtypes, out_dtypes
        used: set[str] = set()
        self.bases = [base_name(lbl, f"in{k}", used) for k, lbl in enumerate(labels)]
        self.labels = labels
        self.outs = [base_name(f"out{k}", f"out{k}", used) for k in range(len(block.savers))]
        self.splits = splits(block)
        """The summed outputs by the grid dims they sum over (split-K), combined in this launch (`combine`)."""
        self.parts = {k: base_name(f"part{k}", f"part{k}", used) for k in range(len(block.savers)) if block.summed(k)}
        """Per summed output, its partials: one tile per block along its split, in float32."""
        self.counts = {dims: base_name(f"count{j}", f"count{j}", used) for j, dims in enumerate(self.splits)}
        """Per split, its row counters: int32, one per output tile (`combine`)."""
        self.combined: dict[tuple[str, ...], list[str]] = {dims: [] for dims in self.splits}
        self.layout = Layout(block, self.bases, sizes)
        self.streams = {i: c for i, c in streamed(block, self.layout.shape).items()
                        if not self.layout.dims[block.nodes[i].inputs[0][0]][-1].masked}
        """The matmuls summed over K in chunks (prism.codegen.stream), by node index: their chunk's K lanes. A K of
        runtime size is masked at launch, so it stays one dot."""
        self.chunked = chunked(block, self.streams)
        """The streamed matmuls' operand loaders: (the matmul, K's dim). The matmul loads them, chunk by chunk."""
        self.runtime_loop = next((t for t in self.layout.classes if t.runtime and t.looped), None)
        """The tile dim of runtime size the loop walks: the trip count is then an argument, LOOP."""
        self.num_warps = num_warps or block.launch.num_warps or default_warps(block, self.layout)
        self.num_stages = block.launch.num_stages
        self.pdl = pdl or block.launch.pdl
        """Programmatic dependent launch (prism.ir.Launch.pdl): the block graph's launch, or the caller's."""
        types = {t.dtype for n in block.nodes for t in n.outputs} | set(in_dtypes) | set(out_dtypes)
        self.compute = "float64" if "float64" in types else "float32"
        self.schedule = block.schedule()
        self.looped = self.schedule.looped
        self.uses = block.consumers()
        self.idents = {f"{n}_ptr" for n in self.buffers} | {"pid_x", "pid_y", "pid_z"} | RESERVED
        self.vals: dict[int, _Val] = {}
        self.cache: dict[tuple, str] = {}
        self.load_modifier = ""
        """A cache modifier for every load (".cg": past L1), or "" for Triton's default."""
        self.rescales: dict[int, str] = {}
        """Per running max (prism.ir.kinds.RunningMax), the factor its online accumulators rescale by."""
        self.lane_masks: dict[str, str] = {}
        self.s = _Scopes()
        self.pids: set[str] = set()
        self.strides: dict[str, list[str]] = {}

    # -- names -----------------------------------------------------------------------------------

    @property
    def buffers(self) -> list[str]:
        """The base names of every tensor the kernel takes, in parameter order: inputs, outputs, split-K partials
        (by output), row counters (by split)."""
        return self.bases + self.outs + list(self.parts.values()) + list(self.counts.values())

    def fresh(self, want: str) -> str:
        return unique(want, self.idents)

    # -- values ------------------------------------------------------------------------------------

    def lines(self, scope: str) -> list[str]:
        """The lines of a schedule place (prism.ir.kinds: "pre", "loop", "post")."""
        return getattr(self.s, scope)

    def define(self, i: int, want: str, expr: str, dtype: str, clean: bool) -> None:
        """Node i's value: a fresh name like `want` set to `expr`, where the schedule places node i."""
        scope = self.schedule[i]
        self.vals[i] = _Val(self.fresh(want), dtype, scope, clean)
        self.lines(scope).append(f"{self.vals[i].name} = {expr}{self.shape_comment(i)}")

    def alias(self, i: int, src: int) -> None:
        """Node i's value is node src's (in the compute dtype)."""
        v = self.vals[src]
        self.vals[i] = _Val(self.operand(src, self.compute), self.compute, v.scope, v.clean)

    def accumulator(self, i: int, identity: float) -> str:
        """A fresh accumulator for node i, set to `identity` before the loop; its name."""
        return self.carried(i, identity, "post")

    def carried(self, i: int, identity: float, scope: str, shape: str | None = None) -> str:
        """A variable for node i carried across loop iterations, set to `identity` before the loop; node i's
        value in `scope` ("post" for an accumulator's final value, "loop" for a running value); its name. `shape`:
        another shape of its lanes to carry it in (default: its tile's)."""
        name = self.fresh(f"acc{i}" if scope == "post" else f"m{i}")
        self.vals[i] = _Val(name, self.compute, scope, False)
        shape, dtype = shape or self.layout.shape_expr(i), TL_DTYPES[self.compute]
        init = (f"tl.zeros({shape}, dtype={dtype})" if identity == 0
                else f"tl.full({shape}, {literal(identity)}, {dtype})")
        self.s.init.append(f"{name} = {init}{self.shape_comment(i)}")
        return name

    def operand(self, i: int, dtype: str, clean: bool = False) -> str:
        """Node i's value in `dtype`, with padded lanes zeroed if `clean`; helper lines go in its scope."""
        v = self.vals[i]
        clean = clean and not v.clean and any(t.masked for t in self.layout.dims[i])
        if clean:
            key = (i, v.dtype, True)
            if key not in self.cache:
                self.cache[key] = self.fresh(f"{v.name}_z")
                mask = self.full_mask(self.layout.dims[i])
                self.lines(v.scope).append(f"{self.cache[key]} = tl.where({mask}, {v.name}, 0.0)")
            v = _Val(self.cache[key], v.dtype, v.scope, True)
        if v.dtype == dtype:
            return v.name
        key = (i, dtype, clean)
        if key not in self.cache:
            self.cache[key] = self.fresh(f"{v.name}_{SHORT_DTYPES[dtype]}")
            self.lines(v.scope).append(f"{self.cache[key]} = {v.name}.to({TL_DTYPES[dtype]})")
        return self.cache[key]

    def squeeze(self, i: int, dims: list[int], dtype: str) -> str:
        """Node i's value with padded size-1 dims `dims` cut back to one lane (lane 0), to broadcast."""
        name = self.operand(i, dtype)
        key = (i, dtype, "squeeze", tuple(dims))
        if key not in self.cache:
            self.cache[key] = self._lane0(name, self.layout.dims[i], dims, self.lines(self.vals[i].scope))
        return self.cache[key]

    def rescale(self, r: int, acc: int) -> str:
        """Running max r's rescale factor (alpha) fitted to online accumulator `acc`'s tile: a size-1 dim of r
        that is padded (it shares a class with a loop tile of one lane that a tl.dot pads) is cut back to
        lane 0 where acc's dim is another class, else the two would not broadcast."""
        dims = self.layout.dims[r]
        cut = [d for d, (a, b) in enumerate(zip(dims, self.layout.dims[acc])) if a is not b and a.tile == 1 and a.padded]
        if not cut:
            return self.rescales[r]
        key = (r, "rescale", tuple(cut))
        if key not in self.cache:
            self.cache[key] = self._lane0(self.rescales[r], dims, cut, self.s.loop)
        return self.cache[key]

    def _lane0(self, name: str, dims: tuple[TileDim, ...], cut: list[int], lines: list[str]) -> str:
        """`name` (a tile of `dims`) with dims `cut` reduced to lane 0, keeping them as size-1 dims."""
        for d in cut:
            lane0 = f"tl.arange(0, {dims[d].block}){along(d, len(dims))} == 0"
            new = self.fresh(f"{name}_s{d}")
            lines.append(f"{new} = tl.sum(tl.where({lane0}, {name}, 0.0), axis={d}, keep_dims=True)")
            name = new
        return name

    def shape_comment(self, i: int) -> str:
        dims = self.layout.dims[i]
        real = [t.tile for t in dims]
        block = [t.block for t in dims]
        return f"  # {real}" if real == block else f"  # {real} padded to {block}"

    # -- loaders -----------------------------------------------------------------------------------

    def load_dtype(self, i: int) -> str:
        """Fold a conversion into the load when every consumer wants the same other dtype."""
        storage = self.in_dtypes[self.b.nodes[i].attrs["index"]]
        wants = {self.wanted(c, i) for c in self.uses.get((i, 0), [])}
        return wants.pop() if len(wants) == 1 else storage

    def wanted(self, consumer: int, operand: int) -> str:
        node = self.b.nodes[consumer]
        return node.outputs[0].dtype if contracts(node.op) and not self.b.launch.gemv else self.compute

    # -- the verbs of the node kinds' rules (EMIT) -----------------------------------------------------

    def load(self, i: int, index: int, imap: Mapping[str, int], fmap: int | None) -> None:
        base, dims = self.bases[index], self.layout.dims[i]
        ptrs, mask, strides = self.address(base, dims, imap, fmap, self.s.top)
        self.define(i, base, self.load_expr(i, ptrs, mask), self.load_dtype(i), clean=True)
        self.walk(ptrs, dims, fmap, strides)

    def load_expr(self, i: int, ptrs: str, mask: str | None) -> str:
        """Loader i's `tl.load` of the tile at `ptrs`: masked lanes 0, converted to `load_dtype`, with the launch's
        cache hints."""
        index, imap = self.b.nodes[i].attrs["index"], self.b.nodes[i].attrs["imap"]
        dtype = self.load_dtype(i)
        conv = "" if dtype == self.in_dtypes[index] else f".to({TL_DTYPES[dtype]})"
        args = f", mask={mask}, other=0.0" if mask else ""
        args += f", cache_modifier=\"{self.load_modifier}\"" if self.load_modifier else ""
        if self.b.launch.gemv and not self.load_modifier:   # ptxas takes no eviction hint beside .cg
            args += f", eviction_policy=\"{self.eviction(i, imap)}\""
        return f"tl.load({ptrs}{args}){conv}"

    def walk(self, ptrs: str, dims: tuple[TileDim, ...], fmap: int | None, strides: list[str]) -> None:
        """The loop moves pointers `ptrs` one tile along dim `fmap` every iteration."""
        if fmap is not None and self.looped:
            self.s.advance.append(f"{ptrs} += {dims[fmap].tile_expr} * {strides[fmap]}")

    def eviction(self, i: int, imap: Mapping[str, int]) -> str:
        """Which lines L2 gives up first in a GEMV launch: a tile read by this block alone and anew every
        iteration (a weight streamed once) goes first, one other blocks read too (the activation) stays."""
        shared = any(size > 1 and g not in imap for g, size in zip(self.b.grid_dims, self.b.grid))
        return "evict_first" if self.schedule[i] == INSIDE and not shared else "evict_last"

    def accumulate(self, i: int, src: int, kind: Accumulator, running: int | None = None) -> None:
        if not self.looped:  # one iteration: the value is the tile itself
            self.alias(i, src)
            return
        if kind.dot and self.fusable(i) and not self.plain(self.layout.dims[src]):
            # carried in the shape tl.dot takes, so no iteration changes its layout; the tile's shape after the loop
            acc = self.carried(i, kind.identity, "post", self.folded(self.layout.dims[src]))
            self.s.loop.append(f"{acc} = {self.dot(src, acc=acc, folded=True)}")
            self.vals[i] = _Val(self.fresh(f"{acc}_tile"), self.compute, "post", False)
            self.s.post.append(f"{self.vals[i].name} = tl.reshape({acc}, {self.layout.shape_expr(i)})")
            return
        acc = self.accumulator(i, kind.identity)
        prior = acc if running is None else f"{acc} * {self.rescale(running, i)}"
        if kind.dot and self.fusable(i):
            self.s.loop.append(f"{acc} = {self.dot(src, acc=prior)}")
        else:
            self.s.loop.append(update(kind, acc, prior, self.operand(src, self.compute)))

    def running_max(self, i: int, src: int) -> None:
        if not self.looped:
            self.alias(i, src)
            return
        m = self.carried(i, MAX.identity, INSIDE)
        before, alpha = self.fresh(f"{m}_before"), self.fresh(f"alpha_{m}")
        self.s.loop.append(f"{before} = {m}")
        self.s.loop.append(update(MAX, m, m, self.operand(src, self.compute)))   # a max accumulator, seen inside
        dims = self.layout.dims[i]
        factor = rescaling(TritonBuilder(self.full_mask), Expr(before, dims, False), Expr(m, dims, False))
        self.s.loop.append(f"{alpha} = {factor.text}  # how much its online sums shrink")
        self.rescales[i] = alpha

    def store(self, i: int, src: int, index: int, omap: Mapping[str, int]) -> None:
        base, dims = self.outs[index], self.layout.dims[i]
        ptrs, mask, _ = self.address(base, dims, omap, None, self.s.store)
        margs = f", mask={mask}" if mask else ""
        once = self.b.once(index)
        first = " & ".join(f"({self.pid(g)} == 0)" for g in once)
        if self.summed(index):   # this block's partial tile, in its slot; the last block of the tile sums them
            part = self.parts[index]
            split = self.b.summed(index)
            slot, *strides = self.stride_names(part, len(dims) + 1)
            pptrs, _, _ = self.address(part, dims, omap, None, self.s.store, strides)
            value = f"{self.operand(src, self.compute)}.to({part}_ptr.dtype.element_ty)"
            line = f"tl.store({pptrs} + ({self.linear(split)}) * {slot}, {value}{margs})"
            self.combine(split, ptrs, pptrs, slot, mask, base, dims, first)
        else:
            line = f"tl.store({ptrs}, {self.operand(src, self.compute)}.to({base}_ptr.dtype.element_ty){margs})"
        if once:   # the blocks along these dims hold the same tile: the first one writes it (and sums it in once)
            self.s.store += [f"if {first}:", *indent([line])]
        else:
            self.s.store.append(line)

    def linear(self, dims: Sequence[str]) -> str:
        """This block's index along grid dims `dims` (row-major): its slot in a split, or its row."""
        sizes = [self.b.grid_size(g) for g in dims]
        return " + ".join(f"{self.pid(g)}{''.join(f' * {n}' for n in sizes[k + 1:])}" for k, g in enumerate(dims)) or "0"

    def combine(self, split: tuple[str, ...], ptrs: str, pptrs: str, slot: str, mask: str | None, base: str,
                dims: tuple[TileDim, ...], first: str) -> None:
        """The lines by which the last block of an output tile sums the split's partials of it into the output,
        in slot order (prism.codegen.split says why this is the sum, the same every run)."""
        acc = self.fresh(f"sum_{base}")
        lanes = f", mask={mask}, other=0.0" if mask else ""
        lines = [f"{acc} = tl.zeros({tuple(t.block for t in dims)}, dtype={TL_DTYPES[self.compute]})",
                 f"for j in range(0, {slots(self.b, split)}):  # in slot order",
                 f"    {acc} += tl.load({pptrs} + j * {slot}{lanes}, cache_modifier=\".cg\")",
                 f"tl.store({ptrs}, {acc}.to({base}_ptr.dtype.element_ty){', mask=' + mask if mask else ''})"]
        self.combined[split] += [f"if {first}:", *indent(lines)] if first else lines


    # -- ops ---------------------------------------------------------------------------------------

    def dot(self, i: int, acc: str | None = None, folded: bool = False) -> str:
        """Matmul i's product, plus `acc` if given. With `folded` the product and `acc` are in the shape tl.dot takes
        (`folded`); without, in the tile's, and `acc` is given only where the two are one (`plain`)."""
        node = self.b.nodes[i]
        a, b = (r[0] for r in node.inputs)
        dims, rank = self.layout.dims[i], len(node.outputs[0].shape)
        dtype = node.outputs[0].dtype
        k_padded = self.layout.dims[a][rank - 1].masked
        if i in self.streams:
            product = self.stream(i, folded)
            return f"{acc} + {product}" if acc else product
        if self.b.launch.gemv:
            product = self.gemv(a, b, rank, k_padded)
            return f"{acc} + {product}" if acc else product
        av, bv = self.operand(a, dtype, clean=k_padded), self.operand(b, dtype, clean=k_padded)
        plain = self.plain(dims)
        extra = (f", {acc}" if acc else "") + self.precision(dtype)   # acc: in the shape of the dot's product
        dot = template(node.op)
        if plain:
            return dot.format(av, bv, extra=extra)
        ar, br = (self.fold(s, name) for s, name in ((a, av), (b, bv)))
        product = dot.format(ar, br, extra=extra)
        return product if folded else f"tl.reshape({product}, {self.layout.shape_expr(i)})"

    def precision(self, dtype: str) -> str:
        """tl.dot's arguments after its accumulator for operands of `dtype`: IEEE products for float32 and float64,
        float64 sums where the kernel computes in float64."""
        extra = ', input_precision="ieee"' if dtype in ("float32", "float64") else ""
        return extra + (", out_dtype=tl.float64" if self.compute == "float64" else "")

    def plain(self, dims: tuple[TileDim, ...]) -> bool:
        """tl.dot takes a tile of `dims` as it is: 2-D, or 3-D with a batch of more than one (a GEMV's, any)."""
        return self.b.launch.gemv or len(dims) == 2 or (len(dims) == 3 and dims[0].block > 1)

    @staticmethod
    def folded(dims: tuple[TileDim, ...]) -> str:
        """A tile of `dims` as tl.dot takes it: its batch dims folded into one, none at all if they are all 1."""
        lead = math.prod(t.block for t in dims[:-2])
        return f"({'' if lead == 1 else f'{lead}, '}{dims[-2].block_expr}, {dims[-1].block_expr})"

    def gemv(self, a: int, b: int, rank: int, k_padded: bool) -> str:
        """a @ b as a multiply and a sum over K in the compute dtype (a GEMV launch, prism.ir.Launch): the product
        [..., M, K, N] is summed over K. With one row (M's block 1) it is a [K, N] tile, a's row turned into a
        column, so each thread's partial sums run along the weight's contiguous K when its layout is [N, K]."""
        product = math.prod(self.layout.shape(a)) * self.layout.shape(b)[-1]
        if product > MAX_NUMEL:
            raise CodegenError(f"{self.name}: a GEMV's product {self.b.label((a, 0))} @ {self.b.label((b, 0))} holds "
                               f"{product} elements, more than Triton's {MAX_NUMEL}")
        av, bv = self.operand(a, self.compute, clean=k_padded), self.operand(b, self.compute, clean=k_padded)
        if rank == 2 and self.layout.dims[a][0].block == 1:
            return f"tl.sum(tl.trans({av}) * {bv}, axis=0)[None, :]"
        lead = ":, " * (rank - 2)
        return f"tl.sum({av}[{lead}:, :, None] * {bv}[{lead}None, :, :], axis={rank - 1})"

    def fold(self, i: int, name: str) -> str:
        """`name` (node i's value) in the shape tl.dot takes (`folded`)."""
        if name not in self.cache:
            self.cache[name] = self.fresh(f"{name}_{len(self.folded(self.layout.dims[i]).split(','))}d")
            self.lines(self.vals[i].scope).append(f"{self.cache[name]} = tl.reshape({name}, "
                                                  f"{self.folded(self.layout.dims[i])})")
        return self.cache[name]

    def op(self, i: int) -> None:
        node = self.b.nodes[i]
        dims = self.layout.dims[i]
        rank = len(dims)
        if contracts(node.op):
            expr = self.dot(i)
        else:
            args = []
            for r in node.inputs:
                s, sdims = r[0], self.layout.dims[r[0]]
                cut = [d for d in range(rank) if sdims[d].tile == 1 < dims[d].tile and sdims[d].block > 1]
                text = self.squeeze(s, cut, self.compute) if cut else self.operand(s, self.compute)
                args.append(Expr(text, tuple(UNIT if d in cut else t for d, t in enumerate(sdims)),
                                 self.vals[s].clean))
            expr = render(node.op, args, node.attrs, self.full_mask).text
            if OPS[node.op].family.rule is Shape.GROUP and dims[node.attrs["dim"]].block != node.attrs["size"]:
                raise CodegenError(f"{self.name}: a group sum's result {self.b.label((i, 0))} is padded to "
                                   f"{dims[node.attrs['dim']].block} lanes (a later matmul needs at least "
                                   f"{MIN_DOT}), but its groups give {node.attrs['size']}")
            if OPS[node.op].family.rule is Shape.REDUCE and dims[node.attrs["dim"]].block > 1:
                d = node.attrs["dim"]   # the reduced dim is padded for a later matmul: value in lane 0
                expr = f"tl.where(tl.arange(0, {dims[d].block_expr}){along(d, rank)} == 0, {expr}, 0.0)"
        self.define(i, f"t{i}", expr, self.compute, clean=False)

    def fusable(self, i: int) -> bool:
        """accum(matmul) where the matmul is computed every iteration for this accumulator only (the
        accumulator says whether `tl.dot` may add into it)."""
        src = self.b.nodes[i].inputs[0][0]
        if not (self.looped and contracts(self.b.nodes[src].op) and self.schedule[src] == INSIDE
                and self.uses[(src, 0)] == [i]):
            return False
        # a dot tl.dot takes folded adds into an accumulator carried folded (`accumulate`); an online one is
        # rescaled in its tile's shape, so its product is added after the dot
        return self.plain(self.layout.dims[src]) or not isinstance(kind_of(self.b.nodes[i]), Online)

    def summed(self, k: int) -> bool:
        return bool(self.b.summed(k))

    # -- the kernel --------------------------------------------------------------------------------

    def run(self) -> KernelSpec:
        self.emit_nodes()
        return self.spec(self.body())

    def emit_nodes(self) -> None:
        """Every node's lines, where the schedule places it; the write-back (savers) last."""
        b = self.b
        if len(b.grid) > 1 and max(b.grid[1:]) > MAX_GRID_YZ:
            raise CodegenError(f"{self.name}: grid {b.grid}: CUDA allows at most {MAX_GRID_YZ} blocks along y and z")
        for i, node in b.topo():
            if math.prod(self.layout.shape(i)) > MAX_NUMEL:
                raise CodegenError(f"{self.name}: tile of {b.label((i, 0))} is padded to "
                                   f"{list(self.layout.shape(i))}, more than Triton's {MAX_NUMEL} elements")
            carried = isinstance(kind_of(node), Accumulator) or kind_of(node) is RUNNING_MAX
            looped = [t.name for t in self.layout.dims[i] if t.looped]
            if carried and looped:   # its lanes would be real in some iterations and not in the last
                raise CodegenError(f"{self.name}: {b.label((i, 0))} is carried across the loop and keeps tile dim "
                                   f"{looped[0]}, which the loop splits with a partial last tile; split it evenly")
        fused = {n.inputs[0][0] for i, n in b.topo()
                 if isinstance(kind_of(n), Accumulator) and kind_of(n).dot and self.fusable(i)}
        for i in sorted(range(len(b.nodes)), key=lambda i: isinstance(kind_of(b.nodes[i]), Saver)):
            if i not in fused and i not in self.chunked:   # a streamed matmul loads its operands itself
                kind = kind_of(b.nodes[i])
                rule_for(EMIT, kind, "code generation")(self, i, b.nodes[i], kind)

    def body(self, program_ids: bool = True) -> list[str]:
        """The kernel's lines; without `program_ids` the pids are the caller's (a helper's parameters)."""
        s = self.s
        masks, loop_masks = self.mask_lines()   # first: a ragged dim's mask may need a program id
        out: list[str] = []
        if program_ids:
            out = [phase("program ids")]
            out += [f"pid_{g} = tl.program_id(axis={self.b.grid_dims.index(g)})" for g in self.b.grid_dims
                    if g in self.pids]
            if len(out) == 1:
                out.append("# (one block: no program id needed)")
        pdl = program_ids and self.pdl
        if pdl:
            out += [phase("programmatic dependent launch (prism.ir.Launch.pdl)"), "if PDL:",
                    "    tl.extra.cuda.gdc_wait()  # the kernel before has finished: its writes are visible"]
        out += [phase("pointers to each input's first tile, masks for padded lanes")]
        out += masks + s.top
        if self.looped:
            if s.pre:
                out += [phase("tiles that stay the same in every iteration")] + s.pre
            t = self.runtime_loop
            trips = f"LOOP = cdiv(EXTENT_{t.name}, {t.tile}) iterations" if t else f"{self.b.loop} iterations"
            out += [phase(f"loop: {trips}, accumulators in {SHORT_DTYPES[self.compute]}")]
            out += s.init
            out += ["for i in range(0, LOOP):"] + indent(loop_masks + s.loop + s.advance)
            if s.post:
                out += [phase("after the loop")] + s.post
        else:
            out += [phase("one pass (loop range 1)")] + s.pre + s.post
        if pdl:
            out += ["if PDL:", "    tl.extra.cuda.gdc_launch_dependents()  # the kernel after may launch (and wait for "
                    "this one)"]
        out += [phase("write back")] + s.store
        for split in self.splits:
            out += self.combine_lines(split)
        return out

    def combine_lines(self, split: tuple[str, ...]) -> list[str]:
        """Split-K in this launch (prism.codegen.split): each block has stored its partial tiles; the last block
        of each output tile (a row: the blocks along the split's dims) sums them, stores the output tiles and
        zeroes the row's counter."""
        rows = [g for g, n in zip(self.b.grid_dims, self.b.grid) if n > 1 and g not in split]
        per_row = slots(self.b, split)
        counter, done = self.counts[split], self.fresh("done")
        at = f"{counter}_ptr + ({self.linear(rows)}) * {self.stride_names(counter, 1)[0]}"
        return [phase(f"split-K over {', '.join(f'pid_{g}' for g in split)}: the last of each tile's {per_row} "
                      "blocks sums their partials"),
                "tl.debug_barrier()  # every thread of this block has stored its partials",
                f"{done} = tl.atomic_add({at}, 1, sem=\"acq_rel\", scope=\"gpu\")  # blocks of this tile done "
                "before this one",
                f"if {done} == {per_row - 1}:  # the last: every partial of this tile is stored",
                *indent(self.combined[split]), f"    tl.store({at}, 0)  # zero again for the next launch"]

    def function(self, name: str) -> tuple[list[str], list[str], dict[str, int], list[Param]]:
        """This block graph as a `@triton.jit` helper `name(pid_x, ..., pointers, strides, CONSTEXPRS)` that
        a kernel calls with its own program ids (prism.codegen.tail): its source lines, the program ids it
        takes, its constexprs, and its parameters after the program ids."""
        self.emit_nodes()
        body = self.body(program_ids=False)
        constexprs = self.constexprs(body)
        params = self.params(constexprs)
        pids = [f"pid_{g}" for g in self.b.grid_dims if g in self.pids]
        lines = [f"{', '.join(pids)},  # this block's program ids, given by the caller"] if pids else []
        lines += [p.line for p in params]
        src = [f"# {line}" for line in format_block(self.b).splitlines()]
        src += ["@triton.jit", f"def {name}("] + indent(lines) + ["):"] + indent(body)
        return src, pids, constexprs, params

# ---- the rules: each node kind handed to the Emitter -------------------------------------------------

def _online(em: Emitter, i: int, node: Any, kind: Accumulator) -> None:
    src, r = (ref[0] for ref in node.inputs)
    em.accumulate(i, src, kind, running=r)


EMIT: dict[type, Callable[[Emitter, int, Any, Any], None]] = {
    Loader: lambda em, i, node, kind: em.load(i, node.attrs["index"], node.attrs["imap"], node.attrs["fmap"]),
    Compute: lambda em, i, node, kind: em.op(i),
    Accumulator: lambda em, i, node, kind: em.accumulate(i, node.inputs[0][0], kind),
    Online: _online,
    RunningMax: lambda em, i, node, kind: em.running_max(i, node.inputs[0][0]),
    Saver: lambda em, i, node, kind: em.store(i, node.inputs[0][0], node.attrs["index"], node.attrs["omap"]),
}
"""Each node kind's verb of the Emitter: (the emitter, the node's index, the node, its kind)."""


def update(kind: Accumulator, acc: str, prior: str, x: str) -> str:
    """The statement folding tile `x` into accumulator `acc` of `kind`, from `prior` (`acc`, or `acc` rescaled):
    its combine op's template (prism.ir.ops) on (prior, x), or `acc += x` where that template is an infix
    operator. CodegenError names the accumulator whose combine op has no template."""
    text = template(kind.combine)
    if not text:
        raise CodegenError(f"{kind.name}: its combine op {kind.combine!r} has no Triton template to update it with")
    infix = _INFIX.fullmatch(text)
    if prior == acc and infix:
        return f"{acc} {infix.group(1)}= {x}"
    return f"{acc} = {text.format(prior, x)}"


def phase(title: str) -> str:
    return f"# -- {title} ".ljust(76, "-")


def default_warps(block: BlockGraph, layout: Layout | Padded) -> int:
    """4 warps, or 8 when the tiles loaded and accumulated per iteration hold 16K elements or more
    (at 4 warps the default attention tiles spill registers on sm_90; at 8 they do not)."""
    live = sum(math.prod(layout.shape(i)) for i, n in block.topo()
               if isinstance(kind_of(n), (Loader, Accumulator)))
    return 8 if live >= 16384 else 4


def emit_kernel(block: BlockGraph, name: str, labels: list[str], in_dtypes: list[str],
                out_dtypes: list[str], num_warps: int | None = None,
                sizes: Mapping[tuple[int, int], str] | None = None, pdl: bool = False) -> KernelSpec:
    """Generate kernel `name` for `block`, reading inputs stored in `in_dtypes` (labels name them in
    comments) and writing outputs stored in `out_dtypes` (summed outputs: a zeroed fp32/fp64 buffer).
    `num_warps` overrides the block graph's launch (`block.launch`); with neither, 4 or 8 from the tile sizes
    (`default_warps`). Stages are the launch's, or Triton's default. `sizes` maps (input index, dim) to the name
    of a dynamic size: those extents are kernel arguments, counted at launch (prism.codegen.layout), and
    CodegenError says why where they cannot be. `pdl` launches it with programmatic dependent launch whatever
    the block graph's launch says (prism.ir.Launch.pdl)."""
    if len(labels) != len(block.input_types) or len(in_dtypes) != len(labels):
        raise CodegenError(f"{name}: the block graph loads {len(block.input_types)} input(s), "
                           f"got {len(labels)} label(s) and {len(in_dtypes)} dtype(s)")
    if len(out_dtypes) != len(block.savers):
        raise CodegenError(f"{name}: the block graph saves {len(block.savers)} output(s), "
                           f"got {len(out_dtypes)} dtype(s)")
    return Emitter(block, name, list(labels), list(in_dtypes), list(out_dtypes), num_warps, sizes, pdl).run()
