"""OptimizedGraph: the chosen µGraph, callable on torch tensors, with its Triton source and its report.

It runs in one of three ways, fixed when it is made and stated in `.execution` and in the report:
  "cuda"         the generated Triton kernels on CUDA tensors (a GPU is present);
  "interpreter"  the same kernels in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1 was set
                 before Triton was imported);
  "reference"    the chosen µGraph through `prism.interp.run`, the reference executor, on CPU tensors
                 (no GPU and no interpreter: correct but slow, and it never runs the generated code).
"""

from __future__ import annotations

import warnings
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from prism.codegen.compiled import CompiledGraph, check_inputs
from prism.errors import InputError
from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES
from prism.ir.graph import check_sizes
from prism.runtime.graphed import GraphedCall
from prism.runtime.torch_op import runner_op
from prism.tune.report import Report

__all__ = ["CUDA", "INTERPRETER", "REFERENCE", "EXECUTION_TEXT", "OptimizedGraph", "execution_mode"]

CUDA, INTERPRETER, REFERENCE = "cuda", "interpreter", "reference"
EXECUTION_TEXT = {
    CUDA: "generated Triton kernels on the GPU",
    INTERPRETER: "generated Triton kernels in Triton's interpreter on the CPU (TRITON_INTERPRET=1): "
                 "no GPU, slow",
    REFERENCE: "the chosen µGraph through prism.interp.run (the reference executor) on the CPU: no GPU "
               "and TRITON_INTERPRET was not set, so the generated kernels are not run",
}


def execution_mode(device: torch.device) -> str:
    """How a result for `device` runs: CUDA for a CUDA device, else the interpreter or the reference."""
    if device.type == "cuda":
        return CUDA
    from prism.codegen import interpreting

    return INTERPRETER if interpreting() else REFERENCE


class OptimizedGraph:
    """`opt(*tensors)` returns the program's outputs as a list (like `prism.interp.run`). Inference only:
    inputs that require grad are refused unless autograd is off (torch.no_grad()). Where the chosen graph runs
    a kernel as the tail of another (prism.codegen.tail), its calls on one GPU must not overlap (two streams,
    two threads): they share the row counters."""

    def __init__(self, program: KernelGraph, graph: KernelGraph, report: Report,
                 device: torch.device | str = "cpu", search_result: Any = None, torch_op: bool = True,
                 compiled: CompiledGraph | None = None, pdl: bool = False) -> None:
        self.program = program
        self.graph = graph
        self.report = report
        self.pdl = pdl
        """Every kernel launched with programmatic dependent launch (prism.ir.Launch.pdl; RunOptions.pdl)."""
        if compiled is not None:   # kernels it shares with other sizes (prism.runtime.buckets), not its own
            self.compiled = compiled
        self.search_result = search_result
        """The SearchResult this was tuned from (None when it came from the result cache)."""
        self.device = torch.device(device)
        self.execution = execution_mode(self.device)
        report.execution = EXECUTION_TEXT[self.execution]
        if self.execution != CUDA:
            warnings.warn(f"prism: no GPU; this OptimizedGraph runs {EXECUTION_TEXT[self.execution]}",
                          RuntimeWarning, stacklevel=3)
        if self.execution == CUDA and any(b.launch.tail for b in graph.blocks):
            self.compiled.reserve(self.device)   # kept between calls: allocated now, outside any graph capture
        self.op: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = self.as_op() if torch_op else None
        """This graph as a torch custom op, `op(list_of_tensors) -> list_of_tensors` (prism.runtime.torch_op):
        what torch.compile traces in its place. Made here, not on first use: tracing must not build it. None
        for the graphs a DynamicGraph serves one size with (prism.runtime.buckets): its own op calls them."""

    @cached_property
    def compiled(self) -> CompiledGraph:
        """The chosen µGraph as generated Triton kernels (`prism.codegen.CompiledGraph`); for a graph a size
        bucket serves, the bucket's kernels, which take its dynamic sizes at launch (given when it is made)."""
        from prism.codegen import compile_graph

        return compile_graph(self.graph, pdl=self.pdl)

    @property
    def launches(self) -> int:
        """Kernels a call launches on a GPU: the plan's steps (fused kernels, kernel-level ops, the casts of
        sums made across blocks); what a decode step's launch count adds up (prism.capture.history)."""
        return len(self.compiled.plan.steps)

    @property
    def triton_source(self) -> str:
        return self.compiled.source

    @property
    def source_path(self) -> Path:
        """The file holding `triton_source` in Prism's cache folder (written if it was not): the generated module
        that runs on a GPU."""
        return self.compiled.source_path

    def __call__(self, *tensors: Any, **kwargs: Any) -> list[torch.Tensor]:
        """The program's outputs (a list) for `tensors`, given by position in the program's input order.

        On a GPU, calls with the signature of the first call (shapes, dtypes, strides, device) take the
        lean path: no binder, one C launch for all kernels (prism.codegen.direct_launch). Under torch.compile
        the call is the custom op `self.op` instead, so the compiled code has no graph break. Inference only:
        inputs that require grad (with grad enabled) are refused.
        """
        if kwargs:
            names = ", ".join(t.name for t in self.program.inputs)
            raise InputError(f"this optimized graph takes its inputs by position ({names}), not by keyword "
                             f"({', '.join(kwargs)})")
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            self.check_inputs(tensors)  # names the first input that requires grad (check_inputs)
        if torch.compiler.is_compiling():
            return self.op(list(tensors))
        return self.run(tensors)

    def run(self, tensors: Sequence[Any]) -> list[torch.Tensor]:
        """Run the chosen µGraph by this graph's execution mode (what the call and the custom op do)."""
        if self.execution == CUDA:
            out = self.compiled.try_bound(tensors)
            if out is not None:
                return out
        self.check_inputs(tensors)
        if self.execution == REFERENCE:
            from prism.interp import run

            outs = run(self.graph, tensors)
            return [o.to(TORCH_DTYPES[t.dtype]) for o, t in zip(outs, self.graph.output_tensors)]
        return self.compiled.run_generic(tensors)

    def run_op(self, tensors: Sequence[Any]) -> list[torch.Tensor]:
        """What the custom op `self.op` runs: `run`, except where that is the reference executor. There the op
        runs the program itself as torch ops (prism.interp.program_fn: no per-call checks, the traced graph
        fixed the inputs), which the verifier proved equal to the chosen µGraph: the block-by-block executor
        is the ground truth for tests, hundreds of times slower than the program, and a compiled model
        without a GPU must not pay that on every call."""
        if self.execution != REFERENCE:
            return self.run(tensors)
        return self.run_program(tensors)

    def run_program(self, tensors: Sequence[Any]) -> list[torch.Tensor]:
        """The program (not the chosen µGraph) as torch ops on `tensors`, on their device: what the verifier
        proved the chosen µGraph equal to (prism.interp.program_fn)."""
        return self._program_fn(tensors)

    @cached_property
    def _program_fn(self) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
        from prism.interp import program_fn

        return program_fn(self.program)

    def check(self, reference: Callable[..., Any] | None = None, seed: int = 1) -> dict[str, Any]:
        """This graph on random inputs (prism.tune.profile.random_inputs) against the program's meaning:
        `reference`, a torch function of the inputs (a workload's), or without one the reference executor on
        the program. Every output must agree to float16 accuracy (prism.tune.profile.close). Returns
        {"ok", "relative_error" (the worst output's), "against", "text"}: what `prism tune` prints and
        `prism bench` tabulates."""
        from prism.interp import run
        from prism.tune.profile import agreement, random_inputs

        inputs = random_inputs(self.program, seed=seed, device=self.device)
        cpu = [t.float().cpu() for t in inputs]
        ok, err = agreement(self(*inputs), reference(*cpu) if reference is not None else run(self.program, cpu))
        against = "the workload's torch reference" if reference is not None else "the reference executor"
        text = (f"chosen kernel vs {against} on random inputs: relative error {err:.1e} "
                f"({'ok' if ok else 'MISMATCH'}, bound 2e-2 of max(1, |out|))")
        return {"ok": ok, "relative_error": err, "against": against, "text": text}

    def against_torch(self, reference: Callable[..., Any] | None = None, inductor: bool = True) -> dict[str, Any]:
        """This graph's time beside the same program as torch runs it (prism.tune.profile.beside_torch), kept in
        `report.torch` and returned: what a user weighs Prism against. `reference` is the program as a torch
        function of the inputs (a workload's; default: the program's own ops, prism.interp.program_fn), run
        eagerly and compiled by Inductor (`inductor` False skips that compile). Without a GPU nothing is timed,
        and `why` says so."""
        from prism.tune.profile import beside_torch, random_inputs

        if self.execution != CUDA:
            self.report.torch = {"why": "not timed: no GPU (a CPU run has no torch kernels to compare, and the "
                                        "cost model does not price cuBLAS or Inductor)"}
        else:
            program = self._program_fn
            fn = reference if reference is not None else lambda *xs: program(xs)
            inputs = random_inputs(self.program, seed=2, device=self.device)
            self.report.torch = beside_torch(lambda *xs: self(*xs), fn, inputs, inductor)
        return self.report.torch

    def as_op(self, runner: Any = None) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
        """The custom op running this graph (registered once per chosen graph and execution mode: graphs that share
        a structural hash run the same kernels), through `runner` if given (an object with `run_op`, as this graph
        has: prism.capture.guarded)."""
        return runner_op(f"g{self.graph.structural_hash()[:16]}_{self.execution}", self.graph, runner or self)

    def check_inputs(self, tensors: Sequence[Any]) -> None:
        """InputError unless `tensors` fit the program's inputs (count, type, shape, dtype, device);
        ConstraintError if the chosen graph's sizes break a constraint its proof needs (prism.ir.sizes)."""
        check_sizes(self.graph, "this optimized graph's µGraph")
        check_inputs(self.program, tensors, "this optimized graph", self._device_rule)

    def cuda_graph(self, *example: torch.Tensor, static: bool = False) -> Any:
        """This graph captured in one CUDA graph for tensors like `example` (prism.runtime.graphed): a call
        then costs one replay. static=False copies each call's tensors into the graph's own inputs;
        static=True reads `example` itself (pass those tensors again). Outputs are reused buffers."""
        if self.execution != CUDA:
            raise InputError(f"CUDA graphs need the GPU; this optimized graph runs {EXECUTION_TEXT[self.execution]}")
        self.check_inputs(example)
        return GraphedCall(self, example, static)

    def _device_rule(self, device: torch.device) -> str | None:
        if self.execution == CUDA and device.type != "cuda":
            return f"this optimized graph runs on CUDA tensors ({self.device})"
        if self.execution != CUDA and device.type != "cpu":
            return "without a GPU this optimized graph runs on CPU tensors"
        return None

    def __repr__(self) -> str:
        best = self.report.best
        return (f"<OptimizedGraph {best.label if best else '?'} via {self.report.method}, "
                f"runs on {self.execution}>")
