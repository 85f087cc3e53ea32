"""An OptimizedGraph as a torch custom op: what torch.compile traces, and CUDA graphs capture, in its place.

Dynamo cannot trace into Triton launches or the reference executor, so under `torch.compile` an
OptimizedGraph call becomes one call of a `torch.library` op (`prism::g<hash>`, schema
`(Tensor[] xs) -> Tensor[]`) with a fake implementation that only makes outputs of the right shapes:
`torch.compile(fullgraph=True)` over code that calls it has no graph break, and Inductor's CUDA graphs
(`mode="reduce-overhead"`) capture the kernels it launches. The op's name comes from the chosen graph's
structural hash, so OptimizedGraphs that run the same kernels share one op. Inference only: no autograd
formula is registered, and OptimizedGraph refuses inputs that require grad before calling it.

Without a GPU (and without Triton's interpreter) the op's CPU kernel runs the program, proved equal to the
chosen µGraph, as torch ops (OptimizedGraph.run_op), not the block-by-block reference executor.

The op is defined with `torch.library.Library` (schema, CPU and CUDA kernels, fake) rather than
`torch.library.custom_op`: the latter's Python wrappers (autograd, then output checks) took the largest
share of a compiled decoder layer's host time, seven calls per step (`benchmarks/decoder_bench.py --profile`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from prism.ir.ops import TORCH_DTYPES

if TYPE_CHECKING:
    from prism.ir import KernelGraph

__all__ = ["define", "runner_op", "NAMESPACE"]

NAMESPACE = "prism"
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
_OPS: dict[str, Callable[..., Any]] = {}
_RUNNERS: dict[str, Any] = {}
"""Per op name: what its kernel calls (`run_op`): an OptimizedGraph, or a background job (prism.capture.background)."""


def runner_op(name: str, graph: KernelGraph, runner: Any) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """Op `prism::name` calling `runner.run_op(xs)` (the latest runner given this name: runners that share a
    name compute the same), with outputs of `graph`'s output types, contiguous as the fake ones are: Inductor
    checks an op's outputs against its fake strides, and the program run as torch ops can end in a view (a
    transpose)."""
    _RUNNERS[name] = runner
    if name not in _OPS:
        outs = [(t.shape, TORCH_DTYPES[t.dtype]) for t in graph.output_tensors]

        def run(xs: list[torch.Tensor]) -> list[torch.Tensor]:
            inputs = {id(x) for x in xs}  # an op's outputs may not alias its inputs
            ys = [y.contiguous() for y in _RUNNERS[name].run_op(xs)]
            return [y.clone() if id(y) in inputs else y for y in ys]

        def fake(xs: list[torch.Tensor]) -> list[torch.Tensor]:
            return [torch.empty(shape, dtype=dtype, device=xs[0].device) for shape, dtype in outs]

        define(name, "Tensor[]", run, fake)
    return _OPS[name]


def define(name: str, returns: str, run: Callable[..., Any], fake: Callable[..., Any]) -> Callable[..., Any]:
    """Op `prism::name(Tensor[] xs) -> returns` with kernel `run` on CPU and CUDA and fake implementation `fake`
    (what tracing runs: outputs of the right shapes, symbolic ones included); defined once per name."""
    if name not in _OPS:
        _LIBRARY.define(f"{name}(Tensor[] xs) -> {returns}")
        for key in ("CPU", "CUDA"):
            _LIBRARY.impl(name, run, key)
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)
        _OPS[name] = getattr(getattr(torch.ops, NAMESPACE), name)
    return _OPS[name]
