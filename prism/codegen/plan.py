"""A kernel graph → a launch plan: the buffers it needs, one generated kernel per step, and their source.

Buffers: graph inputs and outputs keep their declared dtypes; tensors passed between kernels are
stored in float32 (float64 for float64 graphs), so e.g. attention's partial numerator and denominator
lose nothing between its two kernels. An output summed across blocks (an unmapped grid dim of size > 1,
as in split-K) is written with atomic adds into a zeroed float32 buffer; if its tensor is stored in a
narrower dtype, a copy kernel casts the float32 sums afterwards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from prism.codegen.emit import emit_kernel
from prism.codegen.errors import CodegenError
from prism.codegen.lower import elementwise_block, to_custom
from prism.codegen.spec import KernelSpec
from prism.codegen.tail import COUNTER_DTYPE, emit_tail
from prism.ir.builder import Ref
from prism.ir.graph import KernelGraph
from prism.ir.ops import TORCH_DTYPES, TType

__all__ = ["BUFFER_DTYPES", "Buffer", "Step", "Plan", "plan_graph", "HEADER"]

HEADER = "import triton\nimport triton.language as tl\n"
BUFFER_DTYPES = {**TORCH_DTYPES, COUNTER_DTYPE: torch.int32}
"""The torch dtype of a buffer's dtype name: a tensor's, or the int32 of a tail kernel's row counters."""


@dataclass(frozen=True)
class Buffer:
    """A tensor the plan reads or writes: `zero` buffers are zero-filled before the first kernel runs;
    `persistent` ones (a tail kernel's row counters, prism.codegen.tail) are allocated zeroed once and kept,
    and every call leaves them zeroed."""

    shape: tuple[int, ...]
    dtype: str
    zero: bool = False
    persistent: bool = False


@dataclass(frozen=True)
class Step:
    """Launch `kernel` on buffers `inputs` (read) and `outputs` (written)."""

    kernel: KernelSpec
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """Buffers 0..len(inputs)-1 are the graph's inputs; `outputs` lists the buffers returned."""

    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    source: str

    @property
    def kernels(self) -> list[KernelSpec]:
        return [s.kernel for s in self.steps]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]


def _tail_step(a: tuple | None, steps: list[Step], b: tuple, buffers: list[Buffer], num_warps: int | None) -> Step:
    """The step of kernel a (the last one planned, replaced) with tail kernel b run by its last blocks."""
    if a is None or not steps:
        raise CodegenError("a block graph launched as a tail (Launch(tail=True)) must come right after the fused "
                           "kernel that writes its inputs, with no kernel between them")
    (ab, a_in, a_out, a_labels, a_ind, a_outd), (bb, b_in, b_out, b_labels, b_ind, b_outd) = a, b
    passed = [(a_out.index(j), k) for k, j in enumerate(b_in) if j in a_out]
    spec, n_rows = emit_tail(ab, bb, steps.pop().kernel.name, (a_labels, b_labels), (a_ind, b_ind),
                             (a_outd, b_outd), passed, num_warps)
    buffers.append(Buffer((n_rows,), COUNTER_DTYPE, persistent=True))
    return Step(spec, a_in + b_in, a_out + b_out + (len(buffers) - 1,))


def _wide(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


def plan_graph(graph: KernelGraph, num_warps: int | None = None) -> Plan:
    """Lower every kernel-level op to a µGraph, generate every kernel, and lay out the buffers. A block graph
    whose launch says `tail` is generated into the kernel before it (prism.codegen.tail)."""
    lowered, tags = to_custom(graph)
    outputs = set(lowered.outputs)
    buffers: list[Buffer] = []
    where: dict[Ref, int] = {}
    for r in lowered.input_refs:
        where[r] = len(buffers)
        buffers.append(Buffer(lowered.type_of(r).shape, lowered.type_of(r).dtype))
    steps: list[Step] = []
    last: tuple[Any, ...] | None = None   # the previous custom op's (block, ins, outs, labels, in/out dtypes)

    def add(t: TType, dtype: str, zero: bool) -> int:
        buffers.append(Buffer(t.shape, dtype, zero))
        return len(buffers) - 1

    def name(tag: str | None) -> str:
        return f"kernel_{len(steps)}" + (f"_{tag}" if tag else "")

    for i, node in lowered.topo():
        if node.op != "custom":
            continue
        block = node.attrs["block"]
        in_ids = tuple(where[r] for r in node.inputs)
        labels = [lowered.label(r) for r in node.inputs]
        out_ids, out_dtypes, casts = [], [], []
        for k, t in enumerate(node.outputs):
            store = t.dtype if (i, k) in outputs else _wide(t.dtype)
            saver = block.nodes[block.savers[k]]
            summed = any(g > 1 and d not in saver.attrs["omap"] for d, g in zip(block.grid_dims, block.grid))
            final = add(t, store, zero=summed and store == _wide(store))
            where[(i, k)] = final
            if summed and store != _wide(store):
                work = add(t, _wide(store), zero=True)
                casts.append((lowered.label((i, k)), t, work, final))
                out_ids.append(work)
                out_dtypes.append(_wide(store))
            else:
                out_ids.append(final)
                out_dtypes.append(store)
        in_dtypes = [buffers[j].dtype for j in in_ids]
        if block.launch.tail:
            steps.append(_tail_step(last, steps, (block, in_ids, tuple(out_ids), labels, in_dtypes, out_dtypes),
                                    buffers, num_warps))
            last = None
            continue
        spec = emit_kernel(block, name(tags.get(i)), labels, in_dtypes, out_dtypes, num_warps)
        steps.append(Step(spec, in_ids, tuple(out_ids)))
        last = (block, in_ids, tuple(out_ids), labels, in_dtypes, out_dtypes) if not casts else None
        for label, t, work, final in casts:
            copy = elementwise_block(None, {}, [t], t)
            spec = emit_kernel(copy, name("cast"), [f"sums of {label}"],
                               [buffers[work].dtype], [buffers[final].dtype], num_warps)
            steps.append(Step(spec, (work,), (final,)))
    # the kernel graph without its block graphs (each kernel below starts with its own)
    doc = "\n".join(f"# {line}" for line in str(graph).splitlines() if not line.startswith("    "))
    head = f'"""Triton kernels generated by Prism for the kernel graph below."""\n{doc}\n\n{HEADER}'
    source = "\n\n".join([head] + [s.kernel.source for s in steps])
    return Plan(tuple(buffers), tuple(steps), tuple(where[r] for r in lowered.input_refs),
                tuple(where[r] for r in lowered.outputs), source)
