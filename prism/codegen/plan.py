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

import torch

from prism.codegen.emit import emit_kernel
from prism.codegen.errors import CodegenError
from prism.codegen.lower import elementwise_block, to_custom
from prism.codegen.spec import KernelSpec
from prism.codegen.tail import COUNTER_DTYPE, emit_tail
from prism.ir.block import BlockGraph
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


@dataclass(frozen=True)
class _Planned:
    """A custom op as the plan lays it out: its block graph, the buffers it reads and writes, their labels and
    dtypes (what a tail kernel's fused step needs of both kernels)."""

    block: BlockGraph
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    labels: list[str]
    in_dtypes: list[str]
    out_dtypes: list[str]


def _tail_step(a: _Planned, b: _Planned, name: str, buffers: list[Buffer], num_warps: int | None) -> Step:
    """Kernel `name`: a, with tail kernel b run by its last blocks (prism.codegen.tail); adds the row counters."""
    passed = [(a.outputs.index(j), k) for k, j in enumerate(b.inputs) if j in a.outputs]
    spec, n_rows = emit_tail(a.block, b.block, name, (a.labels, b.labels), (a.in_dtypes, b.in_dtypes),
                             (a.out_dtypes, b.out_dtypes), passed, num_warps)
    buffers.append(Buffer((n_rows,), COUNTER_DTYPE, persistent=True))
    return Step(spec, a.inputs + b.inputs, a.outputs + b.outputs + (len(buffers) - 1,))


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
    last: _Planned | None = None   # the custom op of the last step, if nothing came after it

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
        op = _Planned(block, in_ids, tuple(out_ids), labels, [buffers[j].dtype for j in in_ids], out_dtypes)
        if block.launch.tail:
            if last is None:
                raise CodegenError("a block graph launched as a tail (Launch(tail=True)) must come right after the "
                                   "fused kernel that writes its inputs, with no kernel between them")
            steps[-1] = _tail_step(last, op, steps[-1].kernel.name, buffers, num_warps)
            last = None
            continue
        steps.append(Step(emit_kernel(block, name(tags.get(i)), labels, op.in_dtypes, out_dtypes, num_warps), in_ids,
                          op.outputs))
        last = op if not casts else None
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
