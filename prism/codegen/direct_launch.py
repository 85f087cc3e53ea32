"""Launching a compiled graph's kernels without Triton's per-call binder: the lean call path on a GPU.

`kernel[grid](...)` re-binds and re-specializes every argument on every call (tens of µs on a slow
host). A graph's kernels are launched with the same argument values every time except the pointers, so
after the first call (through the generated launchers, which return Triton's compiled kernels) a
`BoundGraph` keeps, per kernel, the loaded function, its launch configuration and every argument but
the pointers. A call then checks the tensors against the signature it was bound with (shapes, dtypes,
strides, device, 16-byte-aligned data: what the kernels were specialized for), collects the buffer
addresses, and launches the whole graph in one call of the C launcher (prism.codegen.native). Kernels that take
sizes at launch (prism.codegen.layout) get them, and their grid, counted from the plan's buffers, which are at
the sizes of the signature (a plan sized by `Plan.at`): a call at other sizes does not match it. Where that
cannot be built, or a kernel needs what it does not do (scratch memory, clusters), each kernel goes
through `CompiledKernel.run`, as Triton's `JITFunction.run` launches it. A call that does not match the
signature takes the generic path, which re-specializes.

Buffers: outputs are allocated per call (they are the caller's); tensors passed between kernels live
at fixed offsets in one workspace, also allocated per call (one allocation, freed in stream order when
the call returns). Nothing else is kept between calls, so a call is safe to capture in a CUDA graph, by
hand or by torch.compile's CUDA graphs, whose memory pools must own every live allocation. The one
exception, the row counters of a tail kernel or a split-K combine (prism.codegen.tail, split), is allocated
by the first (generic) call, before any capture, and every launch leaves it zeroed as it found it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from prism.codegen import native
from prism.codegen.plan import BUFFER_DTYPES, Plan
from prism.codegen.spec import contiguous

__all__ = ["BoundGraph", "ALIGN", "native_steps"]

ALIGN = 256
"""Byte alignment of each buffer in the workspace (Triton specializes pointers on 16-byte alignment)."""


@dataclass(frozen=True)
class _Launch:
    """One kernel launch through Triton: its launcher, the loaded function, every argument but pointers."""

    run: Any
    function: Any
    metadata: Any
    grid: tuple[int, int, int]
    slots: tuple[int, ...]      # plan buffer of each pointer argument, in order
    trailing: tuple[Any, ...]   # the strides and constexprs that follow the pointers


class BoundGraph:
    """A plan's kernels bound to one CUDA device and one input signature; `bound.try_call(tensors)` runs them.

    Made from the compiled kernels the generic path returned for `tensors` (`kernels[k]` launched step
    k), so every argument it passes is one those kernels were specialized for.
    """

    def __init__(self, plan: Plan, tensors: Sequence[torch.Tensor], kernels: Sequence[Any],
                 kept: dict[int, torch.Tensor] | None = None) -> None:
        self.device = tensors[0].device
        self.index = tensors[0].get_device()
        self.signature = tuple((t.shape, t.dtype, t.stride()) for t in tensors)
        strides: dict[int, tuple[int, ...]] = {j: t.stride() for j, t in zip(plan.inputs, tensors)}
        inputs = set(plan.inputs)
        outputs = [j for j in dict.fromkeys(plan.outputs) if j not in inputs]
        self.kept = dict(kept or {})   # persistent buffers (a tail kernel's row counters): the same every call
        if set(self.kept) != {j for j, b in enumerate(plan.buffers) if b.persistent}:
            raise RuntimeError("BoundGraph: every persistent buffer of the plan must be given, and only those")
        inter = [j for j in range(len(plan.buffers)) if j not in inputs and j not in outputs and j not in self.kept]
        self.offsets: list[tuple[int, int]] = []
        size = 0
        for j in inter:
            b = plan.buffers[j]
            self.offsets.append((j, size))
            size += -(-math.prod(b.shape) * BUFFER_DTYPES[b.dtype].itemsize // ALIGN) * ALIGN
        self.workspace_bytes = size
        self.workspace_slot = len(plan.buffers)  # the workspace's own address
        self.outputs = [(j, plan.buffers[j].shape, BUFFER_DTYPES[plan.buffers[j].dtype]) for j in outputs]
        self.inputs = tuple(plan.inputs)
        self.results = tuple(plan.outputs)
        self.n_buffers = len(plan.buffers)
        self.single_device = torch.cuda.is_available() and torch.cuda.device_count() == 1
        self.launches = []
        for step, kernel in zip(plan.steps, kernels):
            slots = step.inputs + step.outputs
            shapes = [plan.buffers[j].shape for j in slots]
            trailing = [s for j in slots for s in strides.get(j) or contiguous(plan.buffers[j].shape)]
            trailing += list(step.kernel.runtime_at(shapes)) + list(step.kernel.constexprs.values())
            if len(slots) + len(trailing) != len(step.kernel.signature):
                raise RuntimeError(f"{step.kernel.name}: {len(slots) + len(trailing)} arguments for a signature of "
                                   f"{len(step.kernel.signature)}")
            grid = step.kernel.grid_at(shapes)
            grid += (1,) * (3 - len(grid))
            self.launches.append(_Launch(kernel.run, kernel.function, kernel.packed_metadata, grid,  # type: ignore
                                         slots, tuple(trailing)))
        module = native.load()
        steps = native_steps(self.launches, kernels) if module else None
        self.native = module.make(steps) if module and steps is not None else None  # type: ignore[union-attr]

    def addresses(self, tensors: Sequence[Any]) -> list[Any] | None:
        """Each buffer's address slot list with the inputs' addresses filled in, if `tensors` match the
        bound signature (so the bound arguments are right for them); else None."""
        if len(tensors) != len(self.signature):
            return None
        out: list[Any] = [0] * (self.n_buffers + 1)
        for t, (shape, dtype, stride), j in zip(tensors, self.signature, self.inputs):
            if (not isinstance(t, torch.Tensor) or t.dtype is not dtype or t.shape != shape
                    or t.stride() != stride or t.get_device() != self.index):
                return None
            out[j] = t.data_ptr()
            if out[j] & 15:
                return None
        for j, t in self.kept.items():
            out[j] = t.data_ptr()
        return out

    def accepts(self, tensors: Sequence[Any]) -> bool:
        return self.addresses(tensors) is not None

    def try_call(self, tensors: Sequence[Any]) -> list[torch.Tensor] | None:
        """The outputs for `tensors` through the bound kernels, or None if they do not match the signature."""
        addresses = self.addresses(tensors)
        if addresses is None:
            return None
        if not self.single_device and torch.cuda.current_device() != self.index:
            with torch.cuda.device(self.index):  # a function runs in the context it was loaded in
                return self.try_call(tensors)
        stream = torch._C._cuda_getCurrentRawStream(self.index)
        if self.workspace_bytes:
            workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=self.device)
            base = addresses[self.workspace_slot] = workspace.data_ptr()
            for j, off in self.offsets:
                addresses[j] = base + off
        made: dict[int, torch.Tensor] = {}
        for j, shape, dtype in self.outputs:
            t = made[j] = torch.empty(shape, dtype=dtype, device=self.device)
            addresses[j] = t.data_ptr()
        if self.native is not None:
            native.load().run(self.native, stream, tuple(addresses))  # type: ignore[union-attr]
        else:
            for k in self.launches:
                k.run(*k.grid, stream, k.function, k.metadata, None, None, None,
                      *[addresses[j] for j in k.slots], *k.trailing)
        if len(made) == len(self.results):
            return [made[j] for j in self.results]
        given = dict(zip(self.inputs, tensors))
        return [made[j] if j in made else given[j] for j in self.results]


def native_steps(launches: Sequence[_Launch], kernels: Sequence[Any]) -> tuple | None:
    """The steps of the C launcher's plan for these launches (see launcher.c), or None for a kernel it
    cannot launch: one that needs scratch memory, clusters, or a cooperative or PDL launch."""
    steps: list[tuple] = []
    for launch, kernel in zip(launches, kernels):
        md = getattr(kernel, "metadata", None)
        if (md is None or not hasattr(kernel, "src") or getattr(md, "global_scratch_size", 0)
                or getattr(md, "profile_scratch_size", 0) or getattr(md, "num_ctas", 1) != 1
                or getattr(md, "launch_pdl", False) or getattr(md, "launch_cooperative_grid", False)):
            return None
        types = list(kernel.src.signature.values())
        values = [("ptr", j) for j in launch.slots] + list(launch.trailing)
        if len(types) != len(values):
            return None
        params = []
        for ty, value in zip(types, values):
            if ty == "constexpr":  # compiled in (constexprs, and ints Triton specialized, such as strides of 1)
                continue
            if isinstance(ty, str) and ty.startswith("*") and isinstance(value, tuple):
                params.append(value)
            elif ty in ("i1", "i32") and isinstance(value, int):  # both travel as 32 bits
                params.append(("i32", value))
            elif ty == "i64" and isinstance(value, int):
                params.append(("i64", value))
            else:
                return None
        steps.append(("kernel", kernel.function, *launch.grid, 32 * md.num_warps, md.shared, tuple(params)))
    return tuple(steps)
