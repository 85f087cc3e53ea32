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

from prism.capture.layout import STEPS
from prism.capture.lower import lower, op_name
from prism.capture.partition import Cone, cones
from prism.errors import PrismError, UnsupportedOp
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
    symbolic = _symbolic(gm, example_inputs)
    if symbolic:
        why = (f"its sizes are symbolic ({symbolic}: dynamic shapes, or Dynamo's automatic dynamic shapes after a "
               "size changed); Prism's kernels serve one shape each, so every op stays with torch")
        record["left"].append({"what": "the whole graph", "why": why})
        log.info("prism: %s: all of it goes to %s", why, OPTIONS.rest)
        return _rest(gm, example_inputs)
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch._guards.tracing(None):  # outside Dynamo's context: its fake mode would make sizes symbolic
        aten = make_fx(gm, tracing_mode="fake")(*example_inputs)
    aten.graph.eliminate_dead_code()  # unread results (attention's log-sum-exp) would count as uses
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    for cone in cones(aten.graph, max_ops=OPTIONS.max_ops):
        _take(aten, cone, device, record)
    aten.graph.eliminate_dead_code()
    aten.recompile()
    ours = {n for n in aten.graph.nodes if n.meta.get("prism")}
    named = {r["what"] for r in record["left"]}
    for node in aten.graph.nodes:
        if node.op == "call_function" and node not in ours and node.name not in named:
            record["left"].append({"what": node.name, "ops": [op_name(node)], "why": "not in a cone Prism took"})
    return _rest(aten, example_inputs)


def _take(gm: torch.fx.GraphModule, cone: Cone, device: torch.device, record: dict[str, Any]) -> None:
    """Replace `cone` by a Prism op; where an op in it cannot be lowered, leave that op and everything the cone
    computes before it to torch, and replace the rest if it still has a matmul (RoPE's products before
    attention stay with torch, and attention is still Prism's)."""
    while True:
        try:
            return _replace(gm, cone, device, record)
        except UnsupportedOp as e:
            cut = _before(cone, e.node)
            if cone.root in cut or not cut:
                return _leave(cone, e, record)
            for node in cut:
                record["left"].append({"what": node.name, "ops": [op_name(node)],
                                       "why": f"cut from the cone ending at {cone.root.name}: {e}"})
            log.info("prism: cut %d op(s) from %s: %s", len(cut), cone.root.name, e)
            cone = Cone(cone.root, [n for n in cone.nodes if n not in cut])
            if not cone.matmuls:
                return _leave(cone, UnsupportedOp("no matmul left after the cut"), record)
        except PrismError as e:  # Prism cannot take this cone: it stays with torch, and says why
            return _leave(cone, e, record)


def _before(cone: Cone, node: Any) -> set[Any]:
    """`node` and the cone's nodes it depends on."""
    members, found, stack = set(cone.nodes), set(), [node]
    while stack:
        n = stack.pop()
        if n in members and n not in found:
            found.add(n)
            stack.extend(n.all_input_nodes)
    return found


def _leave(cone: Cone, e: PrismError, record: dict[str, Any]) -> None:
    ops = [op_name(n) for n in cone.nodes]
    record["left"].append({"what": f"cone ending at {cone.root.name}", "ops": ops, "why": str(e)})
    log.info("prism: left %s (%d ops) to torch: %s", cone.root.name, len(ops), e)


def _replace(gm: torch.fx.GraphModule, cone: Any, device: torch.device, record: dict[str, Any]) -> None:
    """Superoptimize `cone` and put a call of its custom op in place of its root."""
    from prism.runtime import superoptimize

    graph, sources, (shape,) = lower(cone.live(), cone.inputs(), [cone.root])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU: reference executor" is in the record
        opt = superoptimize(graph, device=device, budget=OPTIONS.budget, cache=OPTIONS.cache,
                            search_options=dict(OPTIONS.search), compile=device.type == "cuda")
    fx = gm.graph
    made: list[Any] = []

    def call(target: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(fx.call_function(target, args, kwargs))
        return made[-1]

    with fx.inserting_before(cone.root):
        args = []
        for s in sources:
            value = s.node
            for kind, arg in s.steps:
                value = STEPS[kind](call, value, arg)
            args.append(value)
        outs = call(getattr(opt.op, "default"), args)
        out = call(operator.getitem, outs, 0)
        val = cone.root.meta["val"]  # a fake tensor: later cones read shapes and dtypes from it
        held = graph.output_tensors[0]  # the same elements, dims merged where views merged them
        with val.fake_mode:
            out.meta["val"] = torch.empty(held.shape, dtype=TORCH_DTYPES[held.dtype], device=val.device)
            outs.meta["val"] = [out.meta["val"]]
            if tuple(held.shape) != tuple(val.shape):
                out = call(torch.ops.aten.view.default, out, list(val.shape))
                out.meta["val"] = torch.empty(val.shape, dtype=TORCH_DTYPES[held.dtype], device=val.device)
        if out.meta["val"].dtype != val.dtype or not val.is_contiguous():  # torch's ops after it (a view of
            like = call(torch.ops.aten.empty_strided.default, list(val.shape), list(val.stride()),  # attention's
                        dtype=val.dtype, device=val.device)                # transposed output) see its strides
            out = call(torch.ops.aten.copy.default, like, out)
            out.meta["val"] = val
    for node in made:
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
             ", ".join(sorted({_short(op_name(n)) for n in cone.nodes})), opt.op,
             best.label if best else "?", " (cached)" if opt.report.cached else "")


def _short(name: str) -> str:
    """`mm` for `aten.mm.default`, `getitem` for itself."""
    return name.split(".")[1] if name.startswith("aten.") else name


def _symbolic(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> str:
    """The symbolic sizes Dynamo gave this graph, as text ('' if none)."""
    found = [str(x) for x in example_inputs if isinstance(x, torch.SymInt)]
    for node in gm.graph.nodes:
        val = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            found += [str(n) for n in val.shape if isinstance(n, torch.SymInt)]
    return ", ".join(dict.fromkeys(found))


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
