"""The analytical cost model: seconds a concrete µGraph should take on a target GPU, without running it.

Every op of the graph becomes kernels exactly as code generation launches them (`to_custom`: the fused
kernel, one kernel per kernel-level op; a sum across blocks is combined in its kernel's launch,
prism.codegen.split). A stored sample measured before that combine (the oracle's older runs) keeps its
memset and cast kernel, and is charged for them. For one kernel with G = ∏grid blocks, loop range L, r
blocks resident per SM (limited by warps, shared memory and registers), on a target with S SMs:

    concurrent   C = min(G, S·r)            waves  W = ceil(G / (S·r))       sharing  k = ceil(C / S)
    shares       pipe = sm_bandwidth / k    dram = dram_bandwidth / C    l2 = l2_bandwidth / C
    in flight    q = warps · warp_inflight                             (bytes its warps keep outstanding)
    a load       of d DRAM bytes and h bytes re-read from L2, D loads in flight (Little's law):
                 t(d, h, D) = max((d + h) / min(pipe, D · min(q, d + h) / latency), d / dram, h / l2)
                 tc = tensor_flops / (S·k·u), vc = vector_flops / (S·k), D = min(stages - 1, L) in the loop, else 1
                 u = max(1, warps · mma_tile / dot_tile): warps past the smallest dot's tile repeat its work
    warps        o = k · warps · warp_cost      (every warp on the SM, once per iteration and once after)
    iteration    t_it  = max(t(iter_bytes, iter_l2, D), iter_dot / tc, iter_vec / vc, iteration_latency / D) + o
                 at one stage the first three add up instead (no overlap): max(sum, iteration_latency) + o
    block        t_blk = latency + t(pre_bytes, pre_l2, 1) + L·t_it + post_dot / tc + o
                         + post_vec / vc + store_bytes / min(pipe, dram) (+ latency if it stores)
    spilling     t_blk · (spill_penalty + spill_slope · x)   x: estimated registers per thread over the most
                                                            a thread may hold, as a fraction of that (≥ 0)
    kernel       T = launch + W · t_blk          a stored memset: launch + bytes / dram_bandwidth
    tail         T = latency + W · t_blk         a kernel run by the last block of each row of the kernel
                                                 before it (prism.codegen.tail): no launch, one atomic
                                                 round trip; G = its blocks, one per row

Why this form (the oracle, prism.tune.oracle: 200 candidates of 8 configs measured on an H100): the
kernels tuned here stream weights with 8-16 rows (M), so a block's time is its bytes over what its SM
pulls, and what an SM pulls is bounded by the bytes its blocks keep in flight, not by the chip's DRAM
(the fastest RMSNorm d=4096 candidate reaches 1.1 TB/s, SwiGLU d=4096 2.0 TB/s, on 128 of 132 SMs). So:
- Every byte a block loads passes through its SM (`pipe`), whether DRAM or L2 serves it: a tile other
  blocks also read is an L2 hit but still in flight. Charged apart at the chip's L2 rate only, a kernel
  of 8 blocks each re-reading 48 KB from L2 per iteration was predicted 4x faster than measured
  (attention h=8192: picked 243 µs over 34 µs), and 64 blocks of wide tiles looked as fast as 128
  (RMSNorm d=4096: 50 µs over 30 µs): half the SMs idle halves what the chip pulls.
- DRAM is the chip's measured copy bandwidth (about 3.0 TB/s), a bound a kernel meets only with every
  SM busy; fitting it freely (1.34 TB/s) made up for the two errors above and this one:
- A spill is a small charge (`spill_penalty`, not fitted): the compiler reports only that a stack frame
  exists, not how much is spilled, and the measured spilling candidates were among the fastest of their
  configs (attention h=8192, SwiGLU d=4096); a fitted whole-block factor (2-2.5) absorbed other errors
  and moved picks to kernels measured 3.6x slower. What does tell is how far the estimated registers
  overflow (`_overflow`): a 2-warp GQA kernel needing about twice what a thread may hold measured 74x slower
  than the same at 4 warps, and the H200 model that charged every spill alike picked it (fitted `spill_slope`
  per unit of overflow; `benchmarks/tune_calibrate.py regret --kind h200 --constants fit --without
  spill_slope ...`: geomean regret 1.43, max 73.76, against 1.13 and 2.23 with it).
- Every warp costs time (`warp_cost`): at the same tiles, doubling the warps from 4 to 8 measured 1.18x
  slower over 34 pairs of H200 candidates and from 8 to 16 1.22x over 52, where the model without the
  term predicted 0.98x and 1.00x (`benchmarks/tune_calibrate.py steps --kind h200 --constants fit
  --without warp_cost ...`): what every warp repeats (a small tile's dot duplicated past its mma tiles,
  reductions across warps through shared memory, the loop's own instructions) is paid once per warp, per
  iteration, by the warps of every block sharing the SM. With it the geomean regret of the picks went from
  1.26 to 1.13 on the H200 and from 1.38 to 1.16 on the H100 (`regret`, shipped calibrations). It also
  charges a longer loop: doubling the iterations measured 0.99-1.17x but is predicted 1.12-1.32x
  (`steps --kind h200`), the form error left for the next term.
- A loop at one stage is not pipelined (Triton issues an iteration's loads and waits for them before its dot),
  so its loads and its compute add up; from two stages on they overlap. The model that overlapped them at
  one stage too predicted 1 -> 2 stages x1.00 where the H200 measured x0.88 over 42 pairs, and its picks
  leaned to one stage: fitted on the H200's first runs (a, b) and replayed on its next (c, d) (`regret --kind
  h200 --constants fit --fit-on A B -- C D`), geomean regret 1.28 (5 of 19 within 1.10), with this form 1.11
  (11 of 19); the MoE pick went from one stage (185 µs) to two (114 µs). On the H100's picks it does worse
  (geomean 1.16 -> 1.20, fitted on all): there one stage was measured fastest for RMSNorm's short loops, and
  two stages much slower at loop=2 (RMSNorm d=1024's #32 grid(x=1, y=64) loop=2 warps=8: 8.3 µs at one stage,
  15.2 at two, in tune_samples_h100_d.json), which neither form predicts.

Bytes are DRAM bytes: each loader's real tile (padding lanes are masked, so never read), rounded up
to 32-byte sectors per contiguous run in the layout the input is passed in (a `Linear`'s weight read as
[in, out] has its runs along K: `strides`, else row-major), counted *per block* (a tile replicated across
blocks is read by each of them) and per iteration for loop-split loaders. Of a tile that R blocks read, 1/R is
charged at DRAM speed (`pre_bytes`, `iter_bytes`) and the rest at L2 speed (`pre_l2`, `iter_l2`) when
the tensor fits in L2, since the first reader brought it there; `dram_bytes` counts every read. Stores
count real bytes once per block; an output summed across S blocks (split-K) stores an fp32 partial per
block, and its last block reads the S partials and stores the tile (per block: two fp32 tiles and 1/S of
the tile). A GEMV launch (prism.ir.Launch) computes its products as vector FLOPs on unpadded rows and
holds them in registers. FLOPs use the padded tiles code generation
computes on (Triton's dot padded to 16, a tile padded to a power of two), so padding waste costs compute;
an op counts its `OpDef.flops` per element (several for exp, sqrt, silu, gelu, div, rms_norm:
prism.ir.ops). Which loads and ops repeat every iteration is the block graph's schedule (prism.ir.kinds),
the one code generation follows; each node kind adds its part (`cost` in its record).

Warps and stages are the block graph's launch (prism.ir.Launch; Triton's default stages when unset):
more warps keep more bytes in flight but fit fewer blocks per SM; more stages keep more loop
iterations' loads in flight but stage more shared memory. The rates and latencies are a Target's; a
calibration (prism.tune.calibration, fitted by prism.tune.fit) sets them to measured times.

With ahead-of-time results (`aot=`), warps, shared memory and registers are the compiler's and a
non-empty stack frame means spilling; without, they are estimated (live tiles over threads). A
spilling kernel's block time is multiplied by the target's `spill_penalty`, plus `spill_slope` for each
register per thread the estimate puts over what a thread may hold (`_overflow`): a stack frame alone says
little, a tile twice the register file says much.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from prism.codegen.emit import default_warps
from prism.codegen.layout import Padded
from prism.codegen.one_op import to_custom
from prism.codegen.split import slots
from prism.codegen.stream import chunked, streamed
from prism.ir import BlockGraph, KernelGraph
from prism.ir.kinds import (INSIDE, LOADER, Accumulator, Compute, Loader, RunningMax, Saver, Schedule, kind_of,
                             rule_for)
from prism.ir.ops import OPS, TORCH_DTYPES, contracts
from prism.tune.space import TRITON_STAGES, staged_copies
from prism.tune.target import H100, Target

__all__ = ["COUNT", "Cost", "KernelCost", "KernelWork", "cost_of", "estimate", "kernel_seconds", "kernels_of", "order_of",
           "overfull", "relaunched", "work_of"]

def _wide(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


@dataclass(frozen=True)
class KernelWork:
    """What one kernel launch does, per block: the cost model's whole view of it."""

    name: str
    grid: tuple[int, ...]
    loop: int
    pre_bytes: float          # DRAM bytes loaded once per block (a replicated tile: this block's share of it)
    iter_bytes: float         # ... per loop iteration per block
    store_bytes: int          # DRAM bytes stored per block (split-K: a partial stored and one read back)
    iter_dot: int             # padded tensor-core FLOPs per iteration per block
    post_dot: int             # ... once per block (outside the loop)
    iter_vec: int             # padded vector FLOPs per iteration per block
    post_vec: int
    warps: int
    smem: int                 # bytes of shared memory per block (estimated unless compiled)
    registers: int            # 32-bit registers per thread (estimated unless compiled)
    spills: bool
    real_elements: int        # real elements of every tile, and padded: the padding waste
    padded_elements: int
    atomic: bool = False      # it sums blocks (split-K)
    memset: int = 0           # bytes of zero-filled buffers it adds into (stored samples of atomic adds only)
    read_bytes: int = 0       # bytes every block loads, all counted (replication included)
    pre_l2: float = 0.0       # bytes of replicated tiles re-read from L2, once per block
    iter_l2: float = 0.0      # ... per loop iteration per block
    stages: int = TRITON_STAGES
    fused: bool = False       # one of the graph's own block graphs (its launch is the candidate's), not a lowered op
    tail: bool = False        # run by the last block of each row of the kernel before (no launch of its own)
    staged_smem: int = 0      # bytes of one copy of the operands of Triton's dot loaded anew every iteration
    live: float = 0.0         # 32-bit values a block holds (the register estimate at other warp counts)
    dot_tile: int = 0         # padded output elements of the block's smallest tensor-core dot (0: none)

    def with_launch(self, warps: int, stages: int, target: Target) -> KernelWork:
        """This kernel at other warps and stages, registers re-estimated (the rest does not change)."""
        registers = int(_registers(self.live, warps))
        smem = self.smem + self.staged_smem * (staged_copies(stages) - staged_copies(self.stages))
        most = target.registers(warps)
        return _with(self, warps=warps, stages=stages, smem=smem, registers=min(registers, most),
                     spills=registers > most)

    def to_json(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelWork:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def dram_bytes(self) -> int:
        """Bytes read and written over all blocks, replicated reads counted each time."""
        return self.blocks * (self.read_bytes + self.store_bytes)


@dataclass(frozen=True)
class KernelCost:
    work: KernelWork
    seconds: float
    occupancy: int
    waves: int
    bandwidth: float          # bytes/s each block gets

    def row(self) -> dict[str, Any]:
        w = self.work
        return {"kernel": w.name, "grid": list(w.grid), "loop": w.loop, "blocks": w.blocks, "waves": self.waves,
                "occupancy": self.occupancy, "dram_bytes": w.dram_bytes, "memset_bytes": w.memset,
                "warps": w.warps, "smem": w.smem, "registers": w.registers, "spills": w.spills,
                "padding": round(1 - w.real_elements / max(1, w.padded_elements), 3), "us": self.seconds * 1e6}


@dataclass(frozen=True)
class Cost:
    """The model's estimate for a whole graph: total seconds and one KernelCost per launch."""

    seconds: float
    kernels: tuple[KernelCost, ...]
    target: str
    compiled: bool = False     # warps, shared memory and registers came from ahead-of-time compilation
    notes: tuple[str, ...] = field(default=())

    @property
    def dram_bytes(self) -> int:
        return sum(k.work.dram_bytes + k.work.memset for k in self.kernels)

    @property
    def launches(self) -> int:
        return sum((not k.work.tail) + (k.work.memset > 0) for k in self.kernels)

    def explain(self) -> str:
        lines = [f"estimated {self.seconds * 1e6:.2f} us on {self.target}: {self.launches} launch(es), "
                 f"{self.dram_bytes / 1e6:.3f} MB from/to DRAM"]
        for k in self.kernels:
            r = k.row()
            lines.append(f"  {r['kernel']}: grid {r['grid']} loop {r['loop']}, {r['waves']} wave(s) at "
                         f"{r['occupancy']} block(s)/SM, {r['dram_bytes'] / 1e6:.3f} MB, padding {r['padding']:.0%}, "
                         f"{r['warps']} warps, {r['smem']} B smem, {r['registers']} regs"
                         f"{' (spills)' if r['spills'] else ''} -> {r['us']:.2f} us")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "target": self.target, "compiled": self.compiled,
                "dram_bytes": self.dram_bytes, "launches": self.launches, "notes": list(self.notes),
                "kernels": [k.row() for k in self.kernels]}


# ---- what each kernel does --------------------------------------------------------------------

def order_of(strides: Sequence[int]) -> tuple[int, ...]:
    """A tensor's dims from the one its elements are contiguous along outwards (smallest stride first; a tie,
    such as a dim of size 1, goes to the later dim, as in a row-major tensor)."""
    return tuple(sorted(range(len(strides)), key=lambda d: (strides[d], -d)))


def _run_bytes(tile: Sequence[int], full: Sequence[int], itemsize: int, sector: int,
               order: Sequence[int] | None = None) -> int:
    """DRAM bytes to read (or write) one tile of a tensor laid out in `order` (`order_of`; None: row-major):
    contiguous runs, sector-rounded."""
    run, rows = 1, 1
    whole = True
    for d in reversed(range(len(tile))) if order is None else order:
        if whole:
            run *= tile[d]
            whole = tile[d] == full[d]
        else:
            rows *= tile[d]
    run_bytes = run * itemsize
    return rows * (-(-run_bytes // sector) * sector)


@dataclass
class _Work:
    """One block's work as the node kinds' rules (`COUNT`) add it up: bytes, FLOPs, live elements."""

    block: BlockGraph
    layout: Padded
    schedule: Schedule
    in_dtypes: Sequence[str]
    out_dtypes: Sequence[str]
    summed: Sequence[bool]
    target: Target
    in_orders: Sequence[tuple[int, ...] | None] = ()   # each input's dims, contiguous first (None: row-major)
    bytes: Counter = field(default_factory=Counter)  # "pre", "iter" (DRAM), "pre_l2", "iter_l2", "reads", "store"
    flops: Counter = field(default_factory=Counter)  # ("dot" or "vec", inside the loop?)
    stages: int = TRITON_STAGES
    smem: int = 0
    staged_smem: int = 0
    real: int = 0                                     # elements of every loaded tile, and padded
    padded: int = 0
    live: float = 0.0                                 # 32-bit values held per block (registers)
    dot_tile: int = 0                                 # padded output elements of the smallest dot
    streams: dict[int, int] = field(default_factory=dict)           # matmuls summed over K in chunks (stream.py)
    chunked: dict[int, tuple[int, int]] = field(default_factory=dict)   # their operand loaders: (matmul, K's dim)

    def numel(self, i: int) -> int:
        """Elements of node i's padded tile."""
        return math.prod(self.layout.shape(i))

    def held(self, i: int) -> int:
        """Elements of node i's tile on chip at once: a streamed matmul's operand, one chunk of it."""
        if i not in self.chunked:
            return self.numel(i)
        m, d = self.chunked[i]
        return self.numel(i) // self.layout.shape(i)[d] * self.streams[m]

    def read(self, i: int, index: int, imap: Mapping[str, int]) -> None:
        """Loader i reads its tile of input `index`, which the blocks along grid dims not in `imap` read alike
        (replicated: `copies` of it)."""
        tile, full = self.block.nodes[i].outputs[0].shape, self.block.input_types[index].shape
        dtype = self.in_dtypes[index]
        copies = math.prod(g for p, g in zip(self.block.grid_dims, self.block.grid) if p not in imap)
        size = TORCH_DTYPES[dtype].itemsize
        b = _run_bytes(tile, full, size, self.target.sector, self.in_orders[index] if self.in_orders else None)
        in_loop = self.schedule[i] == INSIDE
        self.bytes["reads"] += b * (self.block.loop if in_loop else 1)
        where = "iter" if in_loop else "pre"
        if copies > 1 and math.prod(full) * size <= self.target.l2_bytes:
            self.bytes[where] += b / copies
            self.bytes[f"{where}_l2"] += b * (1 - 1 / copies)
        else:
            self.bytes[where] += b
        if i in self.chunked and not in_loop and self.schedule[self.chunked[i][0]] == INSIDE:
            self.bytes["iter_l2"] += b   # a loop-invariant operand streamed anew in every iteration
        self.real += math.prod(tile)
        self.padded += self.numel(i)
        self.live += self.held(i) * size / 4

    def write(self, i: int, src: int, index: int) -> None:
        """Saver i writes node src's tile of its output (`index`). A sum across S blocks (prism.codegen.split)
        stores a float32 partial, and the last block of the tile reads the S partials and writes the tile: per
        block, a partial written and one read, and 1/S of the tile. Blocks count per block on average: of those
        along grid dims the output is written once along, one in each row writes."""
        tile, full = self.block.nodes[src].outputs[0].shape, self.block.nodes[i].outputs[0].shape
        b = _run_bytes(tile, full, TORCH_DTYPES[self.out_dtypes[index]].itemsize, self.target.sector)
        if self.summed[index]:
            wide = _run_bytes(tile, full, TORCH_DTYPES[_wide(self.out_dtypes[index])].itemsize, self.target.sector)
            b = 2 * wide + b / slots(self.block, self.block.summed(index))
        writers = math.prod(self.block.grid_size(g) for g in self.block.once(index))
        self.bytes["store"] += b / writers

    def hold(self, i: int) -> None:
        """Node i's padded tile stays live across the loop."""
        self.live += self.numel(i)

    def compute(self, i: int, node: Any) -> None:
        """A table op: tensor-core FLOPs and staged operands for a matmul (in a GEMV launch, vector FLOPs and its
        product held in registers), vector FLOPs for the rest."""
        in_loop = self.schedule[i] == INSIDE
        if contracts(node.op) and self.block.launch.gemv:   # a multiply and a sum: [..., M, K, N] in registers
            (a, _), (b, _) = node.inputs
            product = self.numel(a) * self.layout.shape(b)[-1]
            self.flops["vec", in_loop] += 2 * product
            self.live += product
        elif contracts(node.op):
            (a, _), (b, _) = node.inputs
            self.flops["dot", in_loop] += 2 * self.numel(i) * self.layout.shape(a)[-1]
            self.dot_tile = min(self.dot_tile or self.numel(i), self.numel(i))
            dsize = TORCH_DTYPES[node.outputs[0].dtype].itemsize
            for o in (a, b):
                one = self.held(o) * dsize
                staged = i in self.streams or (self.schedule[o] == INSIDE and self.block.loop > 1)
                if staged and kind_of(self.block.nodes[o]) is LOADER:   # a streamed K loop is pipelined too
                    self.staged_smem += one
                    self.smem += one * staged_copies(self.stages)
                else:
                    self.smem += one
        else:
            largest = max(self.numel(j) for j in [i, *(r[0] for r in node.inputs)])
            self.flops["vec", in_loop] += largest * OPS[node.op].flops


COUNT: dict[type, Callable[[_Work, int, Any, Any], None]] = {
    Loader: lambda cw, i, node, kind: cw.read(i, node.attrs["index"], node.attrs["imap"]),
    Compute: lambda cw, i, node, kind: cw.compute(i, node),
    Accumulator: lambda cw, i, node, kind: cw.hold(i),
    RunningMax: lambda cw, i, node, kind: cw.hold(i),
    Saver: lambda cw, i, node, kind: cw.write(i, node.inputs[0][0], node.attrs["index"]),
}
"""Each node kind's part of a block's work: (the work so far, the node's index, the node, its kind)."""


def work_of(block: BlockGraph, name: str, in_dtypes: Sequence[str], out_dtypes: Sequence[str],
            summed: Sequence[bool], target: Target = H100,
            in_orders: Sequence[tuple[int, ...] | None] = ()) -> KernelWork:
    """The per-block work of `block` launched as code generation launches it; `in_orders`: each input's layout
    (`order_of` its strides; None or none given: row-major)."""
    layout = Padded(block)
    stages = block.launch.num_stages or TRITON_STAGES
    streams = streamed(block, layout.shape)
    w = _Work(block, layout, block.schedule(), in_dtypes, out_dtypes, summed, target, in_orders, stages=stages,
              streams=streams, chunked=chunked(block, streams))
    for i, node in block.topo():
        kind = kind_of(node)
        rule_for(COUNT, kind, "the cost model")(w, i, node, kind)
    live = w.live + max(w.held(i) for i in range(len(block.nodes)))
    warps = block.launch.num_warps or default_warps(block, layout)
    flops = [w.flops[unit, inside] for unit in ("dot", "vec") for inside in (True, False)]
    work = KernelWork(name, block.grid, block.loop, w.bytes["pre"], w.bytes["iter"], w.bytes["store"], *flops, warps,
                      w.smem, 0, False, w.real, w.padded, any(summed), read_bytes=w.bytes["reads"],
                      pre_l2=w.bytes["pre_l2"], iter_l2=w.bytes["iter_l2"], stages=stages, staged_smem=w.staged_smem,
                      live=live, dot_tile=w.dot_tile)
    return work.with_launch(warps, stages, target)      # registers and spills, estimated at these warps


def kernels_of(graph: KernelGraph, target: Target = H100, strides: Sequence[Sequence[int]] | None = None,
               lowered: tuple[KernelGraph, dict[int, str]] | None = None) -> list[KernelWork]:
    """Every kernel code generation launches for `graph`, in launch order (the order of `plan_graph`). `strides`:
    those the graph's inputs are passed with (None: row-major); what kernels pass between them is row-major.
    `lowered`: `to_custom(graph)`, where the caller costs one graph at several launches (its own block graphs
    are the graph's, launches and all)."""
    lowered, tags = lowered or to_custom(graph)
    outputs = set(lowered.outputs)
    dtype_of: dict = {r: lowered.type_of(r).dtype for r in lowered.input_refs}
    order: dict = dict(zip(lowered.input_refs, map(order_of, strides))) if strides else {}
    out: list[KernelWork] = []

    def name(tag: str | None) -> str:
        return f"kernel_{len(out)}" + (f"_{tag}" if tag else "")

    for i, node in lowered.topo():
        if node.op != "custom":
            continue
        block: BlockGraph = node.attrs["block"]
        in_dtypes = [dtype_of[r] for r in node.inputs]
        out_dtypes = [t.dtype if (i, k) in outputs else _wide(t.dtype) for k, t in enumerate(node.outputs)]
        dtype_of.update({(i, k): dtype for k, dtype in enumerate(out_dtypes)})
        summed = [bool(block.summed(k)) for k in range(len(out_dtypes))]
        w = work_of(block, name(tags.get(i)), in_dtypes, out_dtypes, summed, target,
                    [order.get(r) for r in node.inputs])
        out.append(_with(w, fused=i not in tags, tail=block.launch.tail))
    return out


def _with(w: KernelWork, **changes: Any) -> KernelWork:
    """`dataclasses.replace(w, **changes)` without its call of __init__ (KernelWork has no __post_init__ to
    run): the ranking re-costs each tiling's kernels at every launch, and replace, which checks and passes
    every field through __init__, was several times slower than a copy of the fields."""
    if not changes.keys() <= w.__dict__.keys():
        raise TypeError(f"KernelWork has no field(s) {sorted(changes.keys() - w.__dict__.keys())}")
    new = object.__new__(KernelWork)
    new.__dict__.update(w.__dict__, **changes)
    return new


# ---- seconds ------------------------------------------------------------------------------------

def _registers(live: float, warps: int) -> float:
    """Registers per thread a block holding `live` 32-bit values needs at `warps` warps (32 for addresses and
    indices)."""
    return 32 + live / (32 * warps)


def overfull(w: KernelWork, t: Target, times: float) -> bool:
    """Whether `w`'s live values exceed `times` what its threads may hold at its warps (prism.tune.tuner's HEAVY and
    TOO_HEAVY: the compiler spills most of such a kernel)."""
    return w.live > times * t.registers(w.warps) * 32 * w.warps


def _overflow(w: KernelWork, t: Target) -> float:
    """How far the estimated registers per thread exceed what a thread may hold at these warps (the per-thread
    limit, or the SM's register file over the block's threads), as a fraction of it; 0 when they fit."""
    return max(0.0, _registers(w.live, w.warps) / t.registers(w.warps) - 1)


def _occupancy(w: KernelWork, t: Target) -> int:
    limits = [t.max_blocks_per_sm, t.max_warps_per_sm // w.warps]
    if w.smem:
        limits.append(t.smem_per_sm // w.smem)
    if w.registers:
        limits.append(t.regs_per_sm // (w.registers * 32 * w.warps))
    return max(1, min(limits))


def _warps_over_dot(w: KernelWork, t: Target) -> float:
    """How many times over a block's warps compute its smallest dot: each warp's tensor-core instruction makes
    `t.mma_tile` outputs, so more warps than the tile has of those repeat the work (Triton spreads the warps over
    the output and duplicates what is left over). On an H200's timed candidates (tune_samples_h200_a.json and
    _b.json) the model without it picked 16 warps on tiles 16 to 64 columns wide in six of nineteen configs,
    measured 1.87-3.53x slower than the fastest. The per-warp cost (`Target.warp_cost`) now charges most of that:
    refitted without this term, one H200 pick is slower (QK attention h=16384: 1.34 over 1.15;
    `benchmarks/tune_calibrate.py regret --kind h200 --constants fit --without dot_tile ...`)."""
    return max(1.0, w.warps * t.mma_tile / w.dot_tile) if w.dot_tile else 1.0


def kernel_seconds(w: KernelWork, t: Target = H100) -> KernelCost:
    r = _occupancy(w, t)
    concurrent = min(w.blocks, t.sms * r)
    waves = -(-w.blocks // (t.sms * r))
    share = -(-concurrent // t.sms)
    pipe = t.sm_bandwidth / share
    dram = t.dram_bandwidth / concurrent
    l2 = t.l2_bandwidth / concurrent
    cap = min(pipe, dram)
    inflight = w.warps * t.warp_inflight
    depth = min(staged_copies(w.stages), w.loop) if w.loop > 1 else 1     # no more in flight than there are
    tc = t.tensor_flops / (t.sms * share) / _warps_over_dot(w, t)
    per_warp = share * w.warps * t.warp_cost     # the module docstring says why
    vc = t.vector_flops / (t.sms * share)

    def load(dram_bytes: float, l2_bytes: float, depth: int) -> float:
        """Seconds to load `dram_bytes` from DRAM and `l2_bytes` from L2 with `depth` loads in flight: all of
        them through the SM's pipe, each part within its share of the chip."""
        moved = dram_bytes + l2_bytes
        if not moved:
            return 0.0
        bw = min(pipe, depth * min(inflight, moved) / t.dram_latency)
        return max(moved / bw, dram_bytes / dram, l2_bytes / l2)

    t_iter = 0.0
    if w.loop > 1:
        step = t.iteration_latency / depth if w.iter_bytes or w.iter_l2 else t.loop_overhead
        parts = (load(w.iter_bytes, w.iter_l2, depth), w.iter_dot / tc, w.iter_vec / vc)
        t_iter = max(max(parts) if w.stages > 1 else sum(parts), step) + per_warp   # one stage: no overlap
    t_block = (t.dram_latency + load(w.pre_bytes, w.pre_l2, 1) + w.loop * t_iter + w.post_dot / tc + per_warp
               + w.post_vec / vc + w.store_bytes / cap + (t.dram_latency if w.store_bytes else 0.0))
    if w.spills:
        t_block *= t.spill_penalty + t.spill_slope * _overflow(w, t)
    seconds = (t.dram_latency if w.tail else t.launch) + waves * t_block
    if w.memset:
        seconds += t.launch + w.memset / t.dram_bandwidth
    return KernelCost(w, seconds, r, waves, cap)


def estimate(graph: KernelGraph, target: Target = H100, aot: Sequence[Any] | None = None,
             strides: Sequence[Sequence[int]] | None = None) -> Cost:
    """The model's seconds for `graph` on `target`. `aot`: the `CompiledGraph.aot()` results of this
    graph (one per kernel, in launch order) to use the compiler's warps, shared memory and registers.
    `strides`: those its inputs are passed with (None: row-major)."""
    works = kernels_of(graph, target, strides)
    notes = []
    compiled = False
    if aot is not None:
        launched = [w for w in works if not w.tail]   # a tail runs in the compiled kernel before it
        if len(aot) == len(launched):
            # A kernel with a tail: its warps, shared memory and registers are the compiled kernel's; a spill is
            # charged to the tail, whose whole-row tiles make it (the first kernel's live values are its own).
            has_tail = [n + 1 < len(works) and works[n + 1].tail for n in range(len(works))]
            compiled_as = iter(aot)
            a = None
            for n, w in enumerate(works):
                a = a if w.tail else next(compiled_as)
                works[n] = _with(w, warps=a.num_warps, smem=a.shared, registers=a.registers or w.registers,
                                 spills=w.spills if has_tail[n] else a.spills)
            compiled = True
        else:
            notes.append(f"{len(aot)} compiled kernel(s) for {len(launched)} launch(es): compiler figures ignored")
    return cost_of(works, target, compiled, tuple(notes))


def relaunched(works: Sequence[KernelWork], warps: int, stages: int, target: Target = H100) -> list[KernelWork]:
    """`works` with the graph's own kernels at other warps and stages (lowered ops and casts keep theirs):
    one `kernels_of` serves every launch of a tiling."""
    return [w.with_launch(warps, stages, target) if w.fused else w for w in works]


def cost_of(works: Sequence[KernelWork], target: Target = H100, compiled: bool = False,
            notes: tuple[str, ...] = ()) -> Cost:
    """The model's seconds for kernels launched one after another."""
    costs = tuple(kernel_seconds(w, target) for w in works)
    return Cost(sum(c.seconds for c in costs), costs, target.name, compiled, notes)
