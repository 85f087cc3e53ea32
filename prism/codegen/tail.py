"""A kernel run as the tail of the kernel before it: the last block of each row runs it, one launch less.

A split reduction's second kernel (the split-KV combine: rescale each split's sums, add them, divide) is
small: its time in a CUDA graph is mostly its launch (~2-3 µs on an H100). When a block graph's launch says
`tail` (prism.ir.Launch), kernel B is generated into the kernel A that writes its inputs:

    A's blocks, as before                      every block of A stores its tiles of B's inputs
    tl.debug_barrier()                         ... all of its threads have stored them
    done = atomic_add(count[row], 1)           acq_rel, gpu scope: publishes this block's tiles, and the last
    if done == blocks per row - 1:               block of a row sees every tile the others of its row stored
        B's block for this row                 (B's body as a @triton.jit helper, given A's program ids)
        count[row] = 0                         back to 0 for the next launch

A *row* is what one block of B reads: a grid dim q of B (size > 1) pairs with a grid dim p of A of the same
size that maps, in every tensor A writes and B reads, the same data dim (A's omap, B's imap): B's block with
pid_q = r reads exactly what A's blocks with pid_p = r wrote. Every grid dim of B of size > 1 must pair (B's
grid is then at most A's rows; `prism.symbolic.structure.instantiate(tail=True)` gives a split-KV combine
such a grid: a tail mapping, `Mapping.tail`, verified on its own). With no pair, the whole grid is one row
and its last block runs B's one block.

This is the CUTLASS semaphore's ordering (store; barrier; one release by one thread | one acquire by one
thread; barrier; load): Triton runs a scalar atomic on one thread and broadcasts its result through shared
memory, behind a barrier. B's loads also bypass L1 (`.cg`): the acquire already orders them, this only
keeps them from any line of the SM's L1 a future change might leave there. The counters are a buffer of
int32 the plan keeps between calls (`Buffer.persistent`): zeroed once, and every launch leaves them at zero.
So calls of one compiled graph must not overlap (two streams, or two threads each with its own stream).

Neither kernel may sum across blocks (a sum needs a zeroed buffer, and a narrower output a cast kernel after
it), and B must be the very next kernel of the plan; anything else is a CodegenError naming why.
"""

from __future__ import annotations

import math
from typing import Sequence

from prism.codegen.emit import Emitter, phase
from prism.codegen.signature import indent, launcher
from prism.codegen.spec import COUNTER_DTYPE, KernelSpec, Param
from prism.errors import CodegenError
from prism.ir.block import BlockGraph
from prism.ir.printer import format_block

__all__ = ["COUNTER_DTYPE", "emit_tail", "rows"]


def rows(a: BlockGraph, b: BlockGraph, passed: Sequence[tuple[int, int]]) -> list[tuple[str, str]]:
    """(grid dim q of B, grid dim p of A) for each grid dim q of B of size > 1: the pairs that make a row.
    `passed`: (A's output k, B's input j) for each tensor A writes and B reads. CodegenError if some grid dim
    of B pairs with none, or if either kernel sums blocks."""
    for which, block in (("the kernel before it", a), ("a tail kernel", b)):
        for k in range(len(block.savers)):
            summed = block.summed(k)
            if summed:   # sums need a zeroed buffer, and a cast kernel after them for a narrower output
                raise CodegenError(f"a tail kernel needs both kernels to sum nothing across blocks; output {k} of "
                                   f"{which} is summed over grid dim(s) {', '.join(summed)}")
    if not passed:
        raise CodegenError("a tail kernel reads nothing the kernel before it writes")
    pairs = []
    for q, size in zip(b.grid_dims, b.grid):
        if size == 1:
            continue
        dims = {b.nodes[b.loaders[j]].attrs["imap"].get(q) for _, j in passed}
        d = dims.pop() if len(dims) == 1 else None
        match = [p for p, g in zip(a.grid_dims, a.grid) if g == size and d is not None
                 and all(a.nodes[a.savers[k]].attrs["omap"].get(p) == d for k, _ in passed)]
        if not match:
            read = f"data dim {d}" if d is not None else "one data dim in all of them"
            raise CodegenError(f"a tail kernel's grid dim {q} ({size} blocks) pairs with no grid dim of the kernel "
                               f"before it (grid {a.grid}): no dim of that size maps, in every tensor passed "
                               f"between them, the {read} that {q} reads")
        pairs.append((q, match[0]))
    return pairs


def emit_tail(a: BlockGraph, b: BlockGraph, name: str, labels: tuple[list[str], list[str]],
              in_dtypes: tuple[list[str], list[str]], out_dtypes: tuple[list[str], list[str]],
              passed: Sequence[tuple[int, int]], num_warps: int | None = None,
              pdl: bool = False) -> tuple[KernelSpec, int]:
    """Kernel `name`: block graph `a`, then `b` run by the last block of each row (see the module docstring),
    and its number of rows (of counters). `labels`, `in_dtypes`, `out_dtypes` are (a's, b's). Its pointers are
    a's inputs, b's inputs, a's outputs, b's outputs and the row counters, in that order; then their strides;
    then a's constexprs. With `pdl` (or a's launch saying it) the kernel has programmatic dependent launch."""
    pairs = rows(a, b, passed)
    ea = Emitter(a, name, labels[0], in_dtypes[0], out_dtypes[0], num_warps, pdl=pdl)
    eb = Emitter(b, f"{name}_tail", labels[1], in_dtypes[1], out_dtypes[1], num_warps)
    eb.load_modifier = '.cg'
    helper, helper_pids, b_consts, b_params = eb.function(eb.name)
    row_dims = [p for _, p in pairs]
    pid = {p: ea.pid(p) for p in row_dims}
    ea.emit_nodes()
    body = ea.body()
    constexprs = ea.constexprs(body)
    a_params = ea.params(constexprs)
    renamed = [prm.renamed([ea.fresh(f"tail_{n}") for n in prm.names], f"{eb.name}'s {prm.comment}")
               if prm.kind != "constexpr" else prm for prm in b_params]
    count, stride, row, done = (ea.fresh(n) for n in ("count_ptr", "stride_count", "row", "done"))
    n_rows = math.prod(a.grid_size(p) for p in row_dims)
    per_row = math.prod(a.grid) // n_rows
    count_params = [Param("out", [count], ["*i32"], f"{n_rows} row counter(s), int32, zero between launches"),
                    Param("stride", [stride], ["i32"], "stride of the row counters")]

    def kind(params: list[Param], k: str) -> list[Param]:
        return [prm for prm in params if prm.kind == k]

    n_in = len(kind(a_params, "in")), len(kind(b_params, "in"))
    a_strides, b_strides = kind(a_params, "stride"), kind(renamed, "stride")
    params = (kind(a_params, "in") + kind(renamed, "in") + kind(a_params, "out") + kind(renamed, "out")
              + count_params[:1] + a_strides[:n_in[0]] + b_strides[:n_in[1]] + a_strides[n_in[0]:]
              + b_strides[n_in[1]:] + count_params[1:] + kind(a_params, "constexpr"))
    row_of = " + ".join(f"{pid[p]}{''.join(f' * {a.grid_size(r)}' for r in row_dims[k + 1:])}"
                        for k, p in enumerate(row_dims)) or "0"
    by_q = dict(pairs)
    args = [pid[by_q[h.removeprefix("pid_")]] for h in helper_pids]
    args += [n for prm in renamed if prm.kind != "constexpr" for n in prm.names]
    args += [str(b_consts[prm.names[0]]) for prm in b_params if prm.kind == "constexpr"]
    tail = [phase(f"the last block of each row runs {eb.name}"),
            "tl.debug_barrier()  # every thread of this block has stored its tiles",
            f"{row} = {row_of}",
            f"{done} = tl.atomic_add({count} + {row} * {stride}, 1, sem=\"acq_rel\", scope=\"gpu\")  # blocks of "
            "this row done before this one",
            f"if {done} == {per_row - 1}:  # the last of its row: every tile the row's tail reads is stored",
            f"    {eb.name}(", *(f"        {line}," for line in _wrapped(args)), "    )",
            f"    tl.store({count} + {row} * {stride}, 0)  # zero again for the next launch"]
    body = body + tail
    sig = {n: t for prm in params for n, t in zip(prm.names, prm.types)}
    src = helper + ["", ""]
    src += [f"# {line}" for line in format_block(a).splitlines()]
    src += [f"# then {eb.name} in the last of every {per_row} block(s) of each of {n_rows} row(s)"]
    src += ["@triton.jit", f"def {name}("] + indent([prm.line for prm in params]) + ["):"] + indent(body)
    pointers = [prm.names[0] for prm in params if prm.kind in ("in", "out")]
    ranks = [len(prm.names) for prm in params if prm.kind == "stride"]
    src += ["", ""] + launcher(name, a.grid, [(p.removesuffix("_ptr"), r) for p, r in zip(pointers, ranks)],
                               constexprs, ea.num_warps, ea.num_stages, f", then {eb.name} by the last block of "
                               "each row")
    summed_b = tuple(eb.summed(k) for k in range(len(eb.outs)))
    return KernelSpec(name, f"launch_{name}", "\n".join(src) + "\n", a.grid, sig, constexprs,
                      tuple(in_dtypes[0]) + tuple(in_dtypes[1]),
                      tuple(out_dtypes[0]) + tuple(out_dtypes[1]) + (COUNTER_DTYPE,),
                      (False,) * len(out_dtypes[0]) + summed_b + (False,), ea.num_warps, ea.num_stages), n_rows


def _wrapped(args: list[str], width: int = 96) -> list[str]:
    """`args` joined by commas into lines of at most about `width` characters."""
    lines, line = [], ""
    for a in args:
        if line and len(line) + len(a) + 2 > width:
            lines.append(line)
            line = ""
        line = f"{line}, {a}" if line else a
    return lines + [line] if line else lines
