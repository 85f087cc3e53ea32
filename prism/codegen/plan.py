"""A kernel graph → a launch plan: the buffers it needs, one generated kernel per step, and their source.

Buffers: graph inputs and outputs keep their declared dtypes; tensors passed between kernels are
stored in float32 (float64 for float64 graphs), so e.g. attention's partial numerator and denominator
lose nothing between its two kernels. An output summed across blocks (an unmapped grid dim of size > 1,
as in split-K) is combined in its kernel's launch (prism.codegen.split): the kernel also writes a float32
buffer of partial tiles and keeps a persistent buffer of row counters.

Runtime sizes: a plan made with `sizes` (input dims of dynamic size, by name) passes those names along, from
each kernel's inputs to the outputs whose dims have that extent (`Buffer.dynamic`), and its kernels take them
at launch (prism.codegen.layout). `plan.at(values)` is the same plan, the same source and so the same compiled
kernels, with its buffers at other values of those sizes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Mapping

import torch

from prism.codegen.emit import emit_kernel
from prism.codegen.one_op import to_custom
from prism.codegen.spec import COUNTER_DTYPE, KernelSpec
from prism.codegen.split import rows, slots, splits
from prism.codegen.tail import emit_tail
from prism.errors import CodegenError, InputError
from prism.ir.block import BlockGraph
from prism.ir.builder import Ref
from prism.ir.graph import KernelGraph
from prism.ir.ops import TORCH_DTYPES

__all__ = ["BUFFER_DTYPES", "Buffer", "Step", "Plan", "plan_graph", "HEADER"]

HEADER = "import triton\nimport triton.language as tl\n"
BUFFER_DTYPES = {**TORCH_DTYPES, COUNTER_DTYPE: torch.int32}
"""The torch dtype of a buffer's dtype name: a tensor's, or the int32 of a tail kernel's row counters."""


@dataclass(frozen=True)
class Buffer:
    """A tensor the plan reads or writes: `persistent` ones (the row counters of a tail kernel or a split-K
    combine, prism.codegen.tail and split) are allocated zeroed once and kept, and every call leaves them zeroed. `dynamic[d]` names the dynamic size dim d has (None, or no entries: fixed).
    """

    shape: tuple[int, ...]
    dtype: str
    persistent: bool = False
    dynamic: tuple[str | None, ...] = ()

    def at(self, values: Mapping[str, int]) -> Buffer:
        """This buffer with its dynamic dims at `values` (size name -> extent)."""
        if not any(self.dynamic):
            return self
        shape = tuple(n if size is None else values[size] for n, size in zip(self.shape, self.dynamic))
        return replace(self, shape=shape)


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

    @property
    def sizes(self) -> set[str]:
        """The dynamic sizes its kernels take at launch (empty: every size is fixed)."""
        return {size for b in self.buffers for size in b.dynamic if size}

    def at(self, values: Mapping[str, int]) -> Plan:
        """The same kernels (the same source) with every buffer at `values` of the dynamic sizes; InputError if one
        is missing, or larger than a kernel's one block for it holds."""
        missing = self.sizes - set(values)
        if missing:
            raise InputError(f"the plan's kernels take sizes {', '.join(sorted(missing))} at launch; no value given")
        plan = replace(self, buffers=tuple(b.at(values) for b in self.buffers))
        for step in plan.steps:
            shapes = [plan.buffers[j].shape for j in step.inputs + step.outputs]
            for size, most in step.kernel.bounds:
                if size.of(shapes) > most:
                    raise InputError(f"{step.kernel.name} holds a dim of runtime size in one block of {most}; "
                                     f"it is {size.of(shapes)} here: generate the kernels again for this size")
        return plan


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


def _tail_step(a: _Planned, b: _Planned, name: str, buffers: list[Buffer], num_warps: int | None,
               pdl: bool) -> Step:
    """Kernel `name`: a, with tail kernel b run by its last blocks (prism.codegen.tail); adds the row counters."""
    passed = [(a.outputs.index(j), k) for k, j in enumerate(b.inputs) if j in a.outputs]
    spec, n_rows = emit_tail(a.block, b.block, name, (a.labels, b.labels), (a.in_dtypes, b.in_dtypes),
                             (a.out_dtypes, b.out_dtypes), passed, num_warps, pdl)
    buffers.append(Buffer((n_rows,), COUNTER_DTYPE, persistent=True))
    return Step(spec, a.inputs + b.inputs, a.outputs + b.outputs + (len(buffers) - 1,))


def _wide(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


def plan_graph(graph: KernelGraph, num_warps: int | None = None,
               sizes: Mapping[tuple[int, int], str] | None = None, pdl: bool = False) -> Plan:
    """Lower every kernel-level op to a µGraph, generate every kernel, and lay out the buffers. A block graph
    whose launch says `tail` is generated into the kernel before it (prism.codegen.tail). `sizes` maps (input
    index, dim) to the name of a dynamic size, which the kernels then take at launch (module docstring);
    CodegenError where one cannot. `pdl`: every kernel with programmatic dependent launch (prism.ir.Launch.pdl),
    those of kernel-level ops included; without it, those whose block graph's launch says so."""
    lowered, tags = to_custom(graph)
    outputs = set(lowered.outputs)
    buffers: list[Buffer] = []
    where: dict[Ref, int] = {}
    sizes = sizes or {}
    for i, r in enumerate(lowered.input_refs):
        where[r] = len(buffers)
        t = lowered.type_of(r)
        dynamic = tuple(sizes.get((i, d)) for d in range(len(t.shape)))
        buffers.append(Buffer(t.shape, t.dtype, dynamic=dynamic if any(dynamic) else ()))
    steps: list[Step] = []
    last: _Planned | None = None   # the custom op of the last step, if nothing came after it

    def add(shape: tuple[int, ...], dtype: str, dynamic: tuple[str | None, ...] = ()) -> int:
        buffers.append(Buffer(shape, dtype, dynamic=dynamic if any(dynamic) else ()))
        return len(buffers) - 1

    def read(ids: tuple[int, ...]) -> dict[tuple[int, int], str]:
        """The dynamic sizes of the buffers a kernel reads: (its input index, dim) -> size name."""
        return {(k, d): size for k, j in enumerate(ids) for d, size in enumerate(buffers[j].dynamic) if size}

    def name(tag: str | None) -> str:
        return f"kernel_{len(steps)}" + (f"_{tag}" if tag else "")

    for i, node in lowered.topo():
        if node.op != "custom":
            continue
        block = node.attrs["block"]
        in_ids = tuple(where[r] for r in node.inputs)
        labels = [lowered.label(r) for r in node.inputs]
        stores = [t.dtype if (i, k) in outputs else _wide(t.dtype) for k, t in enumerate(node.outputs)]
        tail = block.launch.tail
        if tail and (last is None or read(last.inputs) or read(in_ids)):
            raise CodegenError("a block graph launched as a tail (Launch(tail=True)) must come right after the "
                               "fused kernel that writes its inputs, with no kernel between them" if last is None
                               else "a tail kernel (prism.codegen.tail) cannot take sizes at launch")
        spec = None if tail else emit_kernel(block, name(tags.get(i)), labels, [buffers[j].dtype for j in in_ids],
                                             stores, num_warps, read(in_ids), pdl)
        out_ids = []
        for k, t in enumerate(node.outputs):
            where[(i, k)] = add(t.shape, stores[k], spec.out_sizes[k] if spec else ())
            out_ids.append(where[(i, k)])
        op = _Planned(block, in_ids, tuple(out_ids), labels, [buffers[j].dtype for j in in_ids], stores)
        if spec is None:
            steps[-1] = _tail_step(last, op, steps[-1].kernel.name, buffers, num_warps,  # type: ignore[arg-type]
                                   pdl)
            last = None
            continue
        # split-K (prism.codegen.split): each summed output's partials, then each split's row counters
        parts = tuple(add((slots(block, block.summed(k)),) + t.shape, _wide(stores[k]),
                          (None, *spec.out_sizes[k]) if spec.out_sizes[k] else ())
                      for k, t in enumerate(node.outputs) if block.summed(k))
        for split in splits(block):
            buffers.append(Buffer((rows(block, split),), COUNTER_DTYPE, persistent=True))
            parts += (len(buffers) - 1,)
        steps.append(Step(spec, in_ids, op.outputs + parts))
        last = op   # a tail after a split-K kernel is refused by prism.codegen.tail, with the reason
    # the kernel graph without its block graphs (each kernel below starts with its own)
    doc = "\n".join(f"# {line}" for line in str(graph).splitlines() if not line.startswith("    "))
    head = f'"""Triton kernels generated by Prism for the kernel graph below."""\n{doc}\n\n{HEADER}'
    source = "\n\n".join([head] + [s.kernel.source for s in steps])
    return Plan(tuple(buffers), tuple(steps), tuple(where[r] for r in lowered.input_refs),
                tuple(where[r] for r in lowered.outputs), source)
