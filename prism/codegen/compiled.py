"""`compile_graph(graph) -> CompiledGraph`: a kernel graph as generated Triton kernels, callable on tensors."""

from __future__ import annotations

import contextlib
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import torch

from prism.codegen.aot import AotKernel, compile_aot, describe
from prism.codegen.direct_launch import BoundGraph
from prism.codegen.load import interpreting, load_module, write_module
from prism.codegen.plan import BUFFER_DTYPES, Plan, plan_graph
from prism.codegen.spec import KernelSpec, contiguous
from prism.errors import InputError
from prism.ir.graph import KernelGraph
from prism.ir.ops import TORCH_DTYPES
from prism.ir.graph import check_sizes

__all__ = ["Allocator", "CompiledGraph", "check_inputs", "compile_graph"]

Allocator = Callable[[tuple[int, ...], torch.dtype, torch.device, bool], torch.Tensor]
"""allocate(shape, dtype, device, zero) -> a tensor of that shape (zero-filled if `zero`); any strides."""


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, zero: bool) -> torch.Tensor:
    return (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)


class CompiledGraph:
    """A kernel graph compiled to Triton kernels (one per custom op, one or two per kernel-level op).

    `cg(*tensors)` checks the tensors and runs every kernel, returning the outputs as a list (like
    `prism.interp.run`). Under `TRITON_INTERPRET=1` kernels run in Triton's interpreter on CPU tensors;
    otherwise on CUDA tensors. `.source` is the generated module; `.aot()` compiles every kernel to PTX.
    `allocate` makes every buffer the kernels write (tests pass one that adds guard bands).
    A graph with a tail kernel (prism.codegen.tail) keeps its row counters between calls: its calls on one
    device must not overlap (not on two streams, not from two threads).
    """

    def __init__(self, graph: KernelGraph, plan: Plan, allocate: Allocator | None = None) -> None:
        self.graph, self.plan = graph, plan
        self.allocate: Allocator = allocate or _allocate
        self.bound: dict[int, BoundGraph] = {}
        """Per CUDA device index, the kernels bound by the first call there (prism.codegen.direct_launch)."""
        self.kept: dict[tuple[torch.device, int], torch.Tensor] = {}
        """The plan's persistent buffers (a tail kernel's row counters) per device: zeroed once, then kept."""

    @property
    def source(self) -> str:
        """All the Triton source: every kernel and its launcher, in one module."""
        return self.plan.source

    @property
    def kernels(self) -> list[KernelSpec]:
        return self.plan.kernels

    @property
    def interpret(self) -> bool:
        return interpreting()

    @cached_property
    def module(self) -> ModuleType:
        return load_module(self.plan.source, self.plan.digest)

    @cached_property
    def source_path(self) -> Path:
        """The file of `source` in Prism's cache folder (written if it was not), as `module` imports it."""
        return write_module(self.plan.source, self.plan.digest)

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """Run every kernel: through the bound fast path when `tensors` match the signature it was bound
        with on their device, else through the generated launchers (which binds, the first time)."""
        return self.try_bound(tensors) or self.run_generic(tensors)

    def try_bound(self, tensors: Sequence[Any]) -> list[torch.Tensor] | None:
        """The outputs through the bound kernels if `tensors` match their signature, else None."""
        if tensors and isinstance(tensors[0], torch.Tensor):
            bound = self.bound.get(tensors[0].get_device())
            if bound is not None:
                return bound.try_call(tensors)
        return None

    def run_generic(self, tensors: Sequence[Any]) -> list[torch.Tensor]:
        """Check, allocate every buffer, and launch each kernel through its generated launcher (Triton
        re-specializes the arguments). On a GPU with the default allocator the kernels Triton returns are
        then bound for this device (`self.bound`), so later calls with the same signature skip all that."""
        return self._launch(tensors)[0]

    def launched(self, tensors: Sequence[torch.Tensor]) -> list[AotKernel]:
        """Run every kernel once on `tensors` (CUDA) through the generic path and describe the binaries Triton
        built for that launch (shared memory, registers, stack frame: prism.codegen.aot.describe), one per kernel:
        what `aot()` says of the kernels compiled ahead of time, for the binaries that calls like this one run.
        One compile per kernel where `aot()` and a first call make two (a launch specializes its arguments, an
        ahead-of-time compile does not): the tuner's compile workers on a GPU (prism.tune.compile)."""
        if self.interpret:
            raise InputError("launched: kernels run in Triton's interpreter (TRITON_INTERPRET=1) build no binaries; "
                             "compile ahead of time with aot() instead")
        _, kernels = self._launch(tensors)
        major, minor = torch.cuda.get_device_capability(tensors[0].device)
        return [describe(k, spec, f"cuda:{10 * major + minor}") for spec, k in zip(self.kernels, kernels)]

    def _launch(self, tensors: Sequence[Any]) -> tuple[list[torch.Tensor], list[Any]]:
        """run_generic's outputs, and the compiled kernels Triton's launchers returned (one per plan step)."""
        device = self._check(tensors)
        bufs: list[torch.Tensor | None] = [None] * len(self.plan.buffers)
        for j, t in zip(self.plan.inputs, tensors):
            bufs[j] = t
        for j, b in enumerate(self.plan.buffers):
            if b.persistent:
                bufs[j] = self.persistent(j, device)
            elif bufs[j] is None:
                bufs[j] = self.allocate(b.shape, BUFFER_DTYPES[b.dtype], device, False)
        module = self.module
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            kernels = [getattr(module, step.kernel.launcher)(*(bufs[j] for j in step.inputs + step.outputs))
                       for step in self.plan.steps]
        if device.type == "cuda" and self.allocate is _allocate and device.index not in self.bound \
                and all(t.data_ptr() % 16 == 0 for t in tensors):
            kept = {j: self.persistent(j, device) for j, b in enumerate(self.plan.buffers) if b.persistent}
            self.bound[device.index] = BoundGraph(self.plan, tensors, kernels, kept)
        return [bufs[j] for j in self.plan.outputs], kernels  # type: ignore[misc]

    def persistent(self, j: int, device: torch.device) -> torch.Tensor:
        """Persistent buffer j on `device`, allocated zeroed by the first call there (or by `reserve`)."""
        if device.type == "cuda" and device.index is None:   # "cuda" means the current device, as a call sees it
            device = torch.device("cuda", torch.cuda.current_device())
        if (device, j) not in self.kept:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise InputError("a tail kernel's row counters (prism.codegen.tail) are kept between calls, so "
                                 "they cannot be allocated inside a CUDA graph capture: call the graph once (or "
                                 f"reserve({str(device)!r})) before capturing it")
            b = self.plan.buffers[j]
            self.kept[(device, j)] = self.allocate(b.shape, BUFFER_DTYPES[b.dtype], device, True)
        return self.kept[(device, j)]

    def reserve(self, device: torch.device | str) -> None:
        """Allocate the persistent buffers on `device` now: before a CUDA graph capture or torch.compile's CUDA
        graphs (whose memory pools must not own them)."""
        for j, b in enumerate(self.plan.buffers):
            if b.persistent:
                self.persistent(j, torch.device(device))

    def _check(self, tensors: Sequence[Any]) -> torch.device:
        check_sizes(self.graph, "the compiled graph")   # ConstraintError outside what its proof holds for
        device = check_inputs(self.graph, tensors, "the compiled graph")
        if self.interpret and device.type != "cpu":
            raise InputError(f"Triton's interpreter (TRITON_INTERPRET=1) runs on CPU tensors; "
                             f"inputs are on {device}")
        if not self.interpret and device.type != "cuda":
            raise InputError(f"the generated kernels run on CUDA tensors; inputs are on {device} "
                             "(set TRITON_INTERPRET=1 before importing triton to run them on the CPU)")
        return device

    def __repr__(self) -> str:
        kernels = ", ".join(f"{k.name} grid={k.grid}" for k in self.kernels)
        return f"<CompiledGraph: {len(self.kernels)} kernel(s): {kernels}>"

    def aot(self, target: Any = None, strides: Sequence[Sequence[int]] | None = None) -> list[AotKernel]:
        """Compile every kernel ahead of time (default target sm_90); works without a GPU. `strides`: those the
        graph's inputs will be passed with: each kernel is then compiled as a launch specializes it (its inputs'
        strides, every other buffer contiguous; prism.codegen.aot.compile_aot); None: no stride known."""
        return [compile_aot(getattr(self.module, step.kernel.name), step.kernel, target,
                            self._launch_strides(step, strides) if strides is not None else None)
                for step in self.plan.steps]

    def _launch_strides(self, step: Any, strides: Sequence[Sequence[int]]) -> dict[str, int]:
        """A step's stride parameters (the kernel's first i32 parameters, in its buffers' order) by name, at the
        values a launch passes: the graph inputs' `strides`, every other buffer's contiguous strides."""
        given = dict(zip(self.plan.inputs, strides))
        values = [s for j in step.inputs + step.outputs
                  for s in given.get(j) or contiguous(self.plan.buffers[j].shape)]
        names = [n for n, t in step.kernel.signature.items() if t == "i32"]
        return dict(zip(names, values))


def check_inputs(graph: KernelGraph, tensors: Sequence[Any], who: str,
                 device_rule: Callable[[torch.device], str | None] | None = None) -> torch.device | None:
    """The torch.device of `tensors` if they fit `graph`'s declared inputs exactly (count, torch.Tensor,
    shape, dtype, one device, no gradient wanted), else an InputError naming `who` ("the compiled
    graph", ...). `device_rule(device)` says why an input's device is wrong (None: it is fine). The
    generated kernels are inference-only: an input that requires grad while autograd is on is refused
    (its gradient would silently be lost); under torch.no_grad() it is fine. The reference executor,
    which accepts wider floats, has its own check."""
    expected = graph.inputs
    if len(tensors) != len(expected):
        names = ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in expected)
        raise InputError(f"{who} takes {len(expected)} tensor(s) ({names}), got {len(tensors)}")
    for t, want in zip(tensors, expected):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"input {want.name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != want.shape:
            raise InputError(f"input {want.name} should have shape {list(want.shape)}, got {list(t.shape)}")
        if t.dtype != TORCH_DTYPES[want.dtype]:
            raise InputError(f"input {want.name} should have dtype {want.dtype}, got {t.dtype}")
        why = device_rule(t.device) if device_rule else None
        if why:
            raise InputError(f"input {want.name} is on {t.device}; {why}")
        if t.requires_grad and torch.is_grad_enabled():
            raise InputError(f"input {want.name} requires grad, but {who} is inference-only (autograd cannot "
                             "differentiate through it): call it under torch.no_grad(), or pass .detach()")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise InputError(f"inputs are on different devices: {', '.join(sorted(map(str, devices)))}")
    return next(iter(devices)) if devices else None


def compile_graph(graph: KernelGraph, num_warps: int | None = None,
                  allocate: Allocator | None = None, pdl: bool = False) -> CompiledGraph:
    """Generate Triton for every op of `graph` (custom ops and kernel-level ops alike). `num_warps`
    None picks 4 or 8 per kernel from its tile sizes; `pdl` launches every kernel with programmatic dependent
    launch (prism.ir.Launch.pdl). Nothing is imported or compiled until the first call or `.aot()`."""
    if not isinstance(graph, KernelGraph):
        raise InputError(f"compile_graph: expected a KernelGraph, got {type(graph).__name__}")
    return CompiledGraph(graph, plan_graph(graph, num_warps, pdl=pdl), allocate)
