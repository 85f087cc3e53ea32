"""`torch.compile(model, backend="prism")`: Prism's verified kernels for what it can fuse, torch for the rest.

Dynamo hands the backend an FX graph; it is traced to ATen ops (make_fx, fake tensors), cut into
single-output cones around matmuls (prism.capture.partition), and each cone is lowered to a KernelGraph
(prism.capture.lower) and superoptimized through the result cache, so a second compile of the same model
searches and tunes nothing, and a new batch size re-tunes without re-searching (search results are
size-free). Each cone is replaced by a call of its OptimizedGraph's custom op; what is left goes to
Inductor (`OPTIONS.rest = "inductor"`, the default) or runs eagerly ("eager"). Inference only: a graph
that needs gradients is left to Inductor whole. Every decision is logged (logger "prism.compile") and kept
in `history`: what each cone became, or why it stayed with torch.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from prism.capture.lower import lower, op_name
from prism.capture.partition import cones
from prism.errors import PrismError
from prism.ir.ops import TORCH_DTYPES

__all__ = ["Options", "OPTIONS", "history", "prism_backend", "register"]

log = logging.getLogger("prism.compile")


@dataclass
class Options:
    """How the backend superoptimizes each cone and what runs the rest."""

    rest: str = "inductor"           # "inductor" or "eager": what runs the ops Prism does not take
    budget: int = 16                 # candidates tuned per cone (timed on a GPU)
    search: dict[str, Any] = field(default_factory=lambda: {"time_limit": 300.0})
    max_ops: int = 16                # ops per cone
    cache: Any = True                # superoptimize's result cache (True: the default file)


OPTIONS = Options()
history: list[dict[str, Any]] = []
"""One record per compiled graph: {"replaced": [...], "left": [...]} (what, why, op names)."""


def prism_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The torch.compile backend (see the module docstring)."""
    record: dict[str, Any] = {"replaced": [], "left": []}
    history.append(record)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        record["left"].append({"what": "the whole graph", "why": "it needs gradients; Prism is inference-only"})
        log.info("prism: the graph needs gradients (Prism is inference-only): all of it goes to %s", OPTIONS.rest)
        return _rest(gm, example_inputs)
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch._guards.tracing(None):  # outside Dynamo's context: its fake mode would make sizes symbolic
        aten = make_fx(gm, tracing_mode="fake")(*example_inputs)
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    for cone in cones(aten.graph, max_ops=OPTIONS.max_ops):
        ops = [op_name(n) for n in cone.nodes]
        try:
            _replace(aten, cone, device, record)
        except PrismError as e:  # Prism cannot take this cone: it stays with torch, and says why
            record["left"].append({"what": f"cone ending at {cone.root.name}", "ops": ops, "why": str(e)})
            log.info("prism: left %s (%d ops) to torch: %s", cone.root.name, len(ops), e)
    aten.graph.eliminate_dead_code()
    aten.recompile()
    ours = {n for n in aten.graph.nodes if n.meta.get("prism")}
    for node in aten.graph.nodes:
        if node.op == "call_function" and node not in ours:
            record["left"].append({"what": node.name, "ops": [op_name(node)], "why": "not in a cone Prism took"})
    return _rest(aten, example_inputs)


def _replace(gm: torch.fx.GraphModule, cone: Any, device: torch.device, record: dict[str, Any]) -> None:
    """Superoptimize `cone` and put a call of its custom op in place of its root."""
    from prism.runtime import superoptimize

    graph, sources = lower(cone.live(), cone.inputs(), [cone.root])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU: reference executor" is in the record
        opt = superoptimize(graph, device=device, budget=OPTIONS.budget, cache=OPTIONS.cache,
                            search_options=dict(OPTIONS.search), compile=device.type == "cuda")
    fx = gm.graph
    with fx.inserting_before(cone.root):
        args = []
        for s in sources:
            value = s.node
            for kind, arg in s.steps:
                target = torch.ops.aten.permute.default if kind == "permute" else torch.ops.aten.view.default
                value = fx.call_function(target, (value, list(arg)))
            args.append(value)
        outs = fx.call_function(getattr(opt.op, "default"), (args,))
        out = fx.call_function(operator.getitem, (outs, 0))
        val = cone.root.meta["val"]  # a fake tensor: later cones read shapes and dtypes from it
        ours = TORCH_DTYPES[graph.output_tensors[0].dtype]
        with val.fake_mode:
            out.meta["val"] = val if ours == val.dtype else torch.empty_like(val, dtype=ours)
        outs.meta["val"] = [out.meta["val"]]
        if ours != val.dtype:
            out = fx.call_function(torch.ops.aten._to_copy.default, (out,), {"dtype": val.dtype})
            out.meta["val"] = val
    for node in [*args, outs, out]:
        node.meta["prism"] = True  # the call and its input views, not ops left to torch
    cone.root.replace_all_uses_with(out)
    best = opt.report.best
    record["replaced"].append({"root": cone.root.name, "ops": [op_name(n) for n in cone.nodes], "program": str(graph),
                               "op": str(opt.op), "chosen": best.label if best else None,
                               "cached": opt.report.cached, "search": opt.report.search,
                               "why": opt.report.reason,
                               "dropped": [f"{e.label}: {e.status}" for e in opt.report.entries
                                           if e.status.startswith("dropped")]})
    log.info("prism: replaced %s (%d ops: %s) by %s, %s%s", cone.root.name, len(cone.nodes),
             ", ".join(sorted({op_name(n).split(".")[1] for n in cone.nodes})), opt.op,
             best.label if best else "?", " (cached)" if opt.report.cached else "")


def _rest(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    if OPTIONS.rest == "eager":
        return gm
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def register() -> None:
    """Register the backend as "prism" with torch.compile. Done when this module is imported (by `import
    prism` when torch is already imported, or `import prism.capture`), and through the package's
    `torch_dynamo_backends` entry point when Prism is installed: a checkout on PYTHONPATH has no entry point,
    and `import prism` before torch registers nothing."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    if "prism" not in _COMPILER_FNS and _BACKENDS.get("prism") is None:  # an entry point torch is loading
        register_backend(prism_backend, name="prism")                    # registers itself next


register()
