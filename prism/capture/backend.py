"""`torch.compile(model, backend="prism")`: Prism's verified kernels for what it can fuse, torch for the rest.

Dynamo hands the backend an FX graph; it is traced to ATen ops (make_fx, fake tensors), cut into cones around
matmuls, cones that compute a node in common joined into regions with several outputs (the norm that Q, K and V
project: prism.capture.partition), and each is lowered to a KernelGraph (prism.capture.lower) and superoptimized
through the result cache, so a second compile of the same model searches and tunes nothing, and a new batch size
re-tunes without re-searching (search results are size-free). The cones' programs are superoptimized concurrently,
on threads, before they are replaced one by one (prism.capture.ahead). Each cone is replaced by a call of its
OptimizedGraph's custom op; what is left goes to Inductor (`OPTIONS.rest = "inductor"`, the default) or runs eagerly
("eager"); a rest that only views and copies (`MOVES`: a decode step's KV-cache concatenation) runs as the ATen
graph, not compiled for nothing. `torch.compile(model, backend="prism", options={...})` sets any field of `Options`
for that compile; `options={"cudagraphs": True}` (or `mode="reduce-overhead"`) has Inductor run the rest in CUDA
graphs with Prism's ops captured inside, one graph per size, so a decode step replays as one graph (on a CUDA
device; a CPU graph has none, and `history` says so); `options={"background": True}` replaces cones at once by ops
running their programs and superoptimizes them on a thread, each op switching to its chosen kernels when they are
ready (prism.capture.background: the first compile does not wait for searches). A graph whose sizes Dynamo made
symbolic is traced by AOTAutograd instead (its sizes stay symbols), and each of its cones with symbolic sizes
becomes a Region, one op for every size (prism.capture.dynamic). Inference only: a graph that needs gradients is
left to Inductor whole. A bug of Prism's on a cone leaves that cone to torch (kernels that raise when the model
runs: their op runs the cone's program as torch ops from then on, prism.capture.guarded; a Region's size
likewise, prism.capture.dynamic), and so does a cone whose best is
Prism's unfused program (`_fused`: no fused kernel beat it), or, on a GPU, one that torch runs at least as fast
(prism.capture.against: the cone's own ops timed as the rest runs them). Every decision is logged (logger
"prism.compile"; each region as it is reached, and a summary per graph: prism.capture.watch, which also keeps a
progress line on a terminal) and kept in `history`: what each cone became (its chosen kernels, their launches
and µs: "measured" on a GPU, else the cost model's estimate), or why it stayed with torch, and what the graph
launches per call in all, Prism's kernels and torch's (prism.capture.launches).
"""

from __future__ import annotations

import logging
import operator
import warnings
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch._dynamo.exc import RestartAnalysis
from torch._subclasses.fake_tensor import unset_fake_temporarily

from prism.capture import against, launches
from prism.capture.ahead import Ahead
from prism.capture.aten import op_name
from prism.capture.background import Pending, submit
from prism.capture.guarded import Guarded
from prism.capture.lower import input_strides, lower
from prism.capture.partition import Cone, cones, hoisted, out_of_place, regions
from prism.capture.views import STEPS
from prism.capture.watch import Watch
from prism.errors import InputError, PrismError, UnsupportedOp
from prism.ir.ops import TORCH_DTYPES
from prism.pool import fewer_collections

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
    cudagraphs: bool = False         # the rest (Inductor) in CUDA graphs, Prism's ops captured inside
    background: bool = False         # cones of fixed sizes superoptimized on a thread (prism.capture.background)
    progress: bool = True            # a progress line on stderr when it is a terminal (prism.capture.watch)
    pdl: bool = False                # Prism's kernels with programmatic dependent launch (RunOptions.pdl)

    def configured(self, options: dict[str, Any] | None, mode: str | None) -> Options:
        """These options with torch.compile's `options` and `mode` applied, or an InputError naming what is
        wrong: an unknown option, a mode Prism does not have, CUDA graphs without Inductor."""
        known = {f.name for f in dataclasses.fields(self)}
        if not isinstance(options or {}, dict) or set(options or {}) - known:
            raise InputError(f"backend prism: options {sorted(set(options or {}) - known) or options!r} unknown; "
                             f"it takes {sorted(known)}")
        if mode not in MODES:
            raise InputError(f"backend prism: mode {mode!r} unknown; it takes {sorted(MODES, key=str)}")
        out = dataclasses.replace(self, **(options or {}), **MODES[mode])
        if out.rest not in ("inductor", "eager"):
            raise InputError(f"backend prism: rest={out.rest!r}: it is 'inductor' or 'eager'")
        if out.cudagraphs and out.rest != "inductor":
            raise InputError("backend prism: cudagraphs runs the rest through Inductor's CUDA graphs: "
                             "rest must be 'inductor'")
        if not isinstance(out.pdl, bool):
            raise InputError(f"backend prism: pdl={out.pdl!r}: it is True or False")
        if out.cudagraphs and out.background:
            raise InputError("backend prism: background and cudagraphs do not go together: a CUDA graph keeps "
                             "the program a cone ran when it was captured, never the kernels chosen later")
        return out


MODES: dict[str | None, dict[str, Any]] = {None: {}, "default": {}, "reduce-overhead": {"cudagraphs": True}}
"""torch.compile's modes the backend takes, as options."""


OPTIONS = Options()
NOTHING_LEFT = "no matmul or reduction left after the cut: element-wise ops alone are torch's (Inductor fuses them)"
"""Why `_take` leaves what a cut leaves, where that has neither a matmul nor a reduction (`Cone.reduces`)."""
history: list[dict[str, Any]] = []
"""One record per compiled graph: {"replaced": [...], "left": [...]} (what, why, op names), "launches" (per call of
the graph: Prism's kernels, what torch runs of the rest, named, and the total: prism.capture.launches), and "rest"
where the rest runs as the ATen graph though Inductor was asked for (why)."""


@fewer_collections()
def prism_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None,
                  mode: str | None = None) -> Callable[..., Any]:
    """The torch.compile backend (see the module docstring); `options` and `mode` are torch.compile's. Python's
    cyclic collector runs less often meanwhile (prism.pool.fewer_collections): tracing and lowering build many
    short-lived graphs, and the model's process holds torch's objects, which every full collection walks."""
    opts = OPTIONS.configured(options, mode)
    record: dict[str, Any] = {"replaced": [], "left": []}
    history.append(record)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        record["left"].append({"what": "the whole graph", "why": "it needs gradients; Prism is inference-only"})
        log.info("prism: the graph needs gradients (Prism is inference-only): all of it goes to %s", opts.rest)
        return _rest(gm, example_inputs, opts, record)
    watch = Watch(sum(n.op == "call_function" for n in gm.graph.nodes), opts.progress)
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    if opts.cudagraphs:
        record["cudagraphs"] = ("Inductor records a CUDA graph per size, Prism's ops inside" if device.type == "cuda"
                                else f"none: the graph runs on {device.type} (CUDA graphs are for CUDA tensors)")
    symbolic = _symbolic(gm, example_inputs)
    if symbolic:
        def fuse(aten: torch.fx.GraphModule) -> torch.fx.GraphModule:
            with unset_fake_temporarily():  # the tracer's fake mode is on: searches and tunings need real tensors
                return _fuse(aten, device, record, opts, watch)
        try:
            return _traced(gm, example_inputs, fuse, opts, record)
        except RestartAnalysis:  # Dynamo's signal to trace the frame again (a float made a tensor): not a failure
            history.remove(record)
            raise
        except Exception as e:  # AOTAutograd could not trace it (a data-dependent op): torch runs it as it is
            why = f"its sizes are symbolic ({symbolic}) and tracing it to ATen failed ({type(e).__name__}: {e})"
            record["left"].append({"what": "the whole graph", "why": why})
            log.warning("prism: %s: all of it goes to %s", why, opts.rest)
            record["summary"] = watch.done(record)
            return _rest(gm, example_inputs, opts, record)
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch._guards.tracing(None):  # outside Dynamo's context: its fake mode would make sizes symbolic
        aten = make_fx(gm, tracing_mode="fake")(*example_inputs)
    return _rest(_marked(gm, _fuse(aten, device, record, opts, watch)), example_inputs, opts, record)


def _marked(dynamo: torch.fx.GraphModule, aten: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`aten` (make_fx of Dynamo's graph, fused) with Dynamo's marks on its inputs: where each comes from, and
    which are static (parameters, a StaticCache's tensors). AOTAutograd reads them to tell Inductor which inputs
    keep their addresses; without them Inductor's CUDA graphs refuse a graph that writes an input (a decode step
    writing its KV cache: "skipping cudagraphs due to mutated inputs"). make_fx keeps Dynamo's inputs one for
    one, in order; the constants it (or a fused region) made attributes of the graph get a source of their own,
    as AOTAutograd wants one for each. A graph whose inputs do not line up is left unmarked: Inductor then runs
    it without CUDA graphs, never wrongly."""
    from torch._dynamo.source import ConstantSource

    old, new = dynamo.graph.find_nodes(op="placeholder"), aten.graph.find_nodes(op="placeholder")
    if len(old) != len(new) or "dynamo_compile_id" not in dynamo.meta:
        return aten
    aten.meta.update(dynamo.meta)
    sources = dict(getattr(dynamo, "_param_name_to_source", {}))
    for name, _ in [*aten.named_parameters(remove_duplicate=False), *aten.named_buffers(remove_duplicate=False)]:
        sources.setdefault(name, ConstantSource(f"prism_constant_{name}"))
    aten._param_name_to_source = sources
    for a, b in zip(old, new):
        b._dynamo_source = getattr(a, "_dynamo_source", None)
        if "tensor_dict" in a.meta:
            b.meta["tensor_dict"] = a.meta["tensor_dict"]
    return aten


def _fuse(aten: torch.fx.GraphModule, device: torch.device, record: dict[str, Any],
          opts: Options, watch: Watch) -> torch.fx.GraphModule:
    """`aten` with each cone Prism takes replaced by a call of its op; what is left is named in `record`."""
    from prism.tune.compile import kept_workers

    aten.graph.eliminate_dead_code()  # unread results (attention's log-sum-exp) would count as uses
    out_of_place(aten.graph)          # nn.RMSNorm's add_ on its mean, which no cone could take
    found = regions(cones(aten.graph, max_ops=opts.max_ops))
    watch.regions(len(found), sum(n.op == "call_function" for n in aten.graph.nodes))
    # the regions' tunings compile on the same workers; their programs are superoptimized concurrently
    with kept_workers(), Ahead(device, _options(device, opts)) as ahead:
        if not opts.background:
            for cone in found:
                ahead.start(cone)
        for k, cone in enumerate(found, 1):
            watch.region(k, cone)
            _take(aten, cone, device, record, opts, ahead)
    aten.graph.eliminate_dead_code()
    aten.recompile()
    ours = {n for n in aten.graph.nodes if n.meta.get("prism")}
    named = {name for r in record["left"] for name in r.get("nodes", [])}
    rest = [n for n in aten.graph.nodes if n.op == "call_function" and n not in ours and n.name not in named]
    if rest:   # one entry, not one per op: what no cone holds has one reason
        record["left"].append({"what": f"{len(rest)} op(s) in no cone", "ops": [op_name(n) for n in rest],
                               "nodes": [n.name for n in rest], "why": "not in a cone Prism took"})
    record["summary"] = watch.done(record)
    return aten


def _traced(gm: torch.fx.GraphModule, example_inputs: list[Any],
            fuse: Callable[[torch.fx.GraphModule], torch.fx.GraphModule], opts: Options,
            record: dict[str, Any]) -> Callable[..., Any]:
    """A graph with symbolic sizes, traced to ATen in Dynamo's own fake mode (so its sizes stay symbols) by
    AOTAutograd, `fuse`d there, then run by the rest: Inductor's inner compiler, or the graph as it is.

    AOTAutograd's cache stays off meanwhile: it keys the graph before `fuse`, so a later process would take the
    compiled code from it without running `fuse`, and that code calls the Regions' ops, which only `fuse` defines
    (a second process crashed so: tests/capture/test_dynamic.py)."""
    from torch._functorch import config as functorch_config

    with functorch_config.patch(enable_autograd_cache=False):
        if opts.rest == "eager":
            from functorch.compile import make_boxed_func
            from torch._functorch.aot_autograd import aot_module_simplified

            def as_it_is(g: torch.fx.GraphModule, _: Any) -> Callable[..., Any]:
                return make_boxed_func(_counted(fuse(g), record))
            return aot_module_simplified(gm, example_inputs, fw_compiler=as_it_is)
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs, config_patches=_inductor_config(opts), inner_compile=_inner(record, fuse))


def _take(gm: torch.fx.GraphModule, cone: Cone, device: torch.device, record: dict[str, Any], opts: Options,
          ahead: Ahead) -> None:
    """Replace `cone` by a Prism op; where an op in it cannot be lowered, first leave to torch the operand of it
    that the cone computes apart (`Cone.detach`: a norm's `1 + weight`, which the cone then reads), and where that
    does not do, that op and everything the cone computes before it. The part before that op is then a cone of its
    own where it has a matmul or a reduction (`Cone.before`: a norm and projection whose output is permuted, or,
    where the op is the matmul, the part ending at it), and so is the rest (RoPE's products before attention stay
    with torch, and attention is still Prism's; Qwen3's norm of each head after its projection); what is left
    with neither is element-wise, torch's (NOTHING_LEFT). A region of several cones that Prism cannot take whole
    (symbolic sizes, an op it does not have) is taken cone by cone."""
    if cone.parts:
        sizes = [n for x in [*cone.inputs(), *cone.roots] for n in _shape(x.meta.get("val"))]
        why = "symbolic sizes" if any(isinstance(n, torch.SymInt) for n in sizes) else None
        if why is None:
            try:
                return _replace(gm, cone, device, record, opts, ahead)
            except Exception as e:  # the cones one by one say what stops each
                why = f"{type(e).__name__}: {e}"
        log.info("prism: the region of %s is taken cone by cone (%s)", cone.name, why)
        for part in cone.parts:
            _take(gm, part, device, record, opts, ahead)
        return
    detached: set[Any] = set()     # nodes whose operand was detached once: a second failure there cuts
    while True:
        try:
            return _replace(gm, cone, device, record, opts, ahead)
        except UnsupportedOp as e:
            apart = cone.detach(e.node) if e.node not in detached else None
            if apart is not None:
                detached.add(e.node)
                left, cone = apart
                record["left"].append({"what": f"{len(left)} op(s) detached from the cone ending at {cone.root.name}",
                                       "ops": [op_name(n) for n in left], "nodes": [n.name for n in left],
                                       "why": f"torch computes this operand of {e.node.name}, which the cone reads: "
                                              f"{e}"})
                log.info("prism: detached %d op(s) from %s: %s", len(left), cone.root.name, e)
                continue
            cut, rest = cone.cut(e.node)
            if cone.root in cut or not cut:
                return _leave(cone, e, record)
            before = cone.before(e.node)   # cut elsewhere: the part before is a cone of its own
            left = [n for n in cut if before is None or n not in before.nodes]
            record["left"].append({"what": f"{len(left)} op(s) cut from the cone ending at {cone.root.name}",
                                   "ops": [op_name(n) for n in left], "nodes": [n.name for n in left],
                                   "why": f"cut from the cone ending at {cone.root.name}: {e}"})
            log.info("prism: cut %d op(s) from %s: %s", len(cut), cone.root.name, e)
            if before is not None:
                log.info("prism: the part of %s before %s is a cone of its own, ending at %s",
                         cone.root.name, e.node.name, before.name)
                _take(gm, before, device, record, opts, ahead)
            if not rest.matmuls and not rest.reduces:
                return _leave(rest, UnsupportedOp(NOTHING_LEFT), record)
            cone = rest
        except PrismError as e:  # Prism cannot take this cone: it stays with torch, and says why
            return _leave(cone, e, record)
        except Exception as e:  # a bug of Prism's: the model still runs (the cone stays with torch), and it is said
            log.warning("prism: internal error on the cone ending at %s (%s: %s); please report it",
                        cone.root.name, type(e).__name__, e)
            return _leave(cone, PrismError(f"internal error ({type(e).__name__}: {e})"), record)


def _leave(cone: Cone, e: PrismError, record: dict[str, Any]) -> None:
    ops = [op_name(n) for n in cone.nodes]
    record["left"].append({"what": f"cone ending at {cone.name}", "ops": ops, "nodes": [n.name for n in cone.nodes],
                           "why": str(e)})
    log.info("prism: left %s (%d ops) to torch: %s", cone.name, len(ops), e)


def _replace(gm: torch.fx.GraphModule, cone: Any, device: torch.device, record: dict[str, Any],
             opts: Options, ahead: Ahead) -> None:
    """Superoptimize `cone` and put a call of its custom op in place of its roots: an op for its sizes, or,
    where they are symbolic, a Region's op for every size (prism.capture.dynamic)."""
    nodes, inputs = cone.live(), cone.inputs()
    sizes = [n for x in [*inputs, *cone.roots] for n in _shape(x.meta.get("val"))]
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in inputs:  # a region's weights read after its first root move up to its op
        if order[node] > order[cone.root] and hoisted(node):
            cone.root.prepend(node)
    made: list[Any] = []
    fakes = [v for v in (n.meta.get("val") for n in inputs) if hasattr(v, "fake_mode")]

    def call(target: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(gm.graph.call_function(target, args, kwargs))
        if fakes:
            _fake_value(made[-1], fakes[0].fake_mode)
        return made[-1]

    with warnings.catch_warnings(), gm.graph.inserting_before(cone.root):
        warnings.simplefilter("ignore", RuntimeWarning)  # "no GPU: reference executor" is in the record
        if any(isinstance(n, torch.SymInt) for n in sizes):
            outs, done, pending = _region(cone, nodes, inputs, device, call, opts)
        else:
            outs, done, pending = _static(cone, nodes, inputs, device, call, opts, ahead)
    for node in made:
        node.meta["prism"] = True  # the call and its input views, not ops left to torch
    for root, out in zip(cone.roots, outs):
        root.replace_all_uses_with(out)
    entry = {"root": cone.name, "ops": [op_name(n) for n in cone.nodes]} | done
    record["replaced"].append(entry)
    if pending is not None:
        pending.attach(entry)
    log.info("prism: replaced %s (%d ops: %s) by %s, %s", cone.name, len(cone.nodes),
             ", ".join(sorted({_short(op_name(n)) for n in cone.nodes})), entry["op"], entry["chosen"])


def _fake_value(node: Any, mode: Any) -> None:
    """The value of `node`, an ATen op made for an input step, on its operands' fake tensors (fake `mode`'s),
    where they have them: how many launches the rest makes is read from it (a reshape copies only where its
    operand's strides say so, prism.capture.launches). Nothing where an operand has none or torch's fake kernel
    refuses."""
    if not isinstance(node.target, torch._ops.OpOverload) or node.target.namespace != "aten" \
            or not all(isinstance(n.meta.get("val"), torch.Tensor) for n in node.all_input_nodes):
        return
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta["val"])
    try:
        with mode:
            node.meta["val"] = node.target(*args, **kwargs)
    except Exception:   # noqa: BLE001  (a count, never a reason to fail the compile)
        pass


def _static(cone: Cone, nodes: list[Any], inputs: list[Any], device: torch.device, call: Callable[..., Any],
            opts: Options, ahead: Ahead) -> tuple[list[Any], dict[str, Any], Pending | Guarded]:
    """The cone's op at its sizes, its inputs' steps as ATen nodes before it: (the nodes standing for the
    roots' values, what the record says, what keeps the record up to date: the background job if it is
    superoptimized in the background, else the op's runner, prism.capture.guarded)."""
    graph, sources, _ = lower(nodes, inputs, cone.roots)
    strides = input_strides(sources)   # the layout its inputs come in: what it is tuned for
    if opts.background:
        opt = pending = submit(graph, device, _options(device, opts) | {"strides": strides}, _said)
        done = {"program": str(graph), "strides": strides, "op": str(pending.op), "launches": None, "us": None,
                "measured": False, "cached": None, "search": None, "dropped": []}
    else:
        opt = ahead.optimized(graph, strides)
        _fused(opt)
        said = _said(opt)
        judged = against.verdict(said["us"], _torch_us(nodes, inputs, cone.roots, device, opts.rest))
        done = {"program": str(graph), "strides": strides, "op": str(opt.op)} | said | judged
        pending = Guarded.of(opt)     # the op runs the kernels through it: never breaks the model at run time
    args = []
    for s in sources:
        value = s.node
        for kind, arg in s.steps:
            value = STEPS[kind](call, value, arg)
        args.append(value)
    outs = call(getattr(opt.op, "default"), args)
    results = [_result(call, outs, k, root.meta["val"], held)
               for k, (root, held) in enumerate(zip(cone.roots, graph.output_tensors))]
    outs.meta["val"] = [r.meta["val"] for r in results]
    return results, done, pending


def _result(call: Callable[..., Any], outs: Any, k: int, val: Any, held: Any) -> Any:
    """Output k of the op as the root whose value was `val` (a fake tensor: later cones read shapes and
    dtypes from it) had it: `held` (the graph's output) has its elements, dims merged where views merged them;
    torch's ops after it (a view of attention's transposed output) see the root's dtype and strides."""
    out = call(operator.getitem, outs, k)
    with val.fake_mode:
        out.meta["val"] = torch.empty(held.shape, dtype=TORCH_DTYPES[held.dtype], device=val.device)
        if tuple(held.shape) != tuple(val.shape):
            out = call(torch.ops.aten.view.default, out, list(val.shape))
            out.meta["val"] = torch.empty(val.shape, dtype=TORCH_DTYPES[held.dtype], device=val.device)
    if out.meta["val"].dtype != val.dtype or not val.is_contiguous():
        like = call(torch.ops.aten.empty_strided.default, list(val.shape), list(val.stride()),
                    dtype=val.dtype, device=val.device)
        out = call(torch.ops.aten.copy.default, like, out)
        out.meta["val"] = val
    return out


def _torch_us(nodes: list[Any], inputs: list[Any], roots: list[Any], device: torch.device, rest: str) -> float | None:
    """Torch's time for the cone (prism.capture.against.torch_us), or None where it could not be timed: a failure
    there leaves the comparison out (logged), never the model broken."""
    try:
        return against.torch_us(nodes, inputs, roots, device, rest)
    except Exception as e:
        log.warning("prism: torch's time for the cone ending at %s not measured (%s: %s)", roots[-1].name,
                    type(e).__name__, e)
        return None


def _fused(opt: Any) -> None:
    """A PrismError (the cone stays with torch) when the best of `opt` is Prism's unfused program: no fused kernel
    beat one generated kernel per op, so Prism has nothing to add, and torch's kernels for the same ops (Inductor's,
    by default) are the better baseline to keep. MoE on an H200 (docs/benchmarks.md, its summary's moe row): Prism's
    unfused program 61.7 µs in a CUDA graph, eager 35.3, torch.compile 33.5. A cone of symbolic sizes is tuned per
    size bucket as it runs: its Region runs the cone's ATen ops for a bucket whose best is the unfused program
    (prism.capture.dynamic). A cone superoptimized in the background has no best yet when it is replaced: its op
    runs what the tuner chooses, the unfused program included."""
    if opt.report.unfused:
        best = opt.report.best
        kind = "measured" if best.measured_us is not None else "estimated"
        raise PrismError(f"no fused kernel beat Prism's unfused program ({best.us:.2f} µs {kind}; "
                         f"{opt.report.reason}){_runner_up(opt.report)}: torch runs these ops")


def _runner_up(report: Any) -> str:
    """What a report whose best is the unfused program had of fused forms: its best fused candidate and time,
    and the cost model's best point of each form it ranked (which form was there, and how far it fell short)."""
    from prism.tune.report import UNFUSED

    fused = [e for e in report.entries if e.ok and e.candidate.graph != UNFUSED]
    timed = [e for e in fused if e.us is not None]
    out = ""
    if timed:
        e = min(timed, key=lambda e: e.us)
        out += f"; the best fused candidate, {e.label}, {e.us:.2f} µs"
    if report.forms:
        out += "; forms, the cost model's best of each: " + "; ".join(report.forms_text())
    return out


def _said(opt: Any) -> dict[str, Any]:
    """What a cone's record says about the OptimizedGraph chosen for it (not its op: in the background, the graph
    calls the job's op, which runs it)."""
    from prism.tune.report import Status

    best = opt.report.best
    measured = best is not None and best.measured_us is not None
    return {"chosen": best.label if best else None, "launches": opt.launches, "source": str(opt.source_path),
            "us": None if best is None else best.us,
            "measured": measured,
            "cached": opt.report.cached, "search": opt.report.search, "why": opt.report.reason,
            "dropped": [f"{e.label}: {e.fate}" for e in opt.report.entries if e.status is Status.DROPPED]}


def _region(cone: Cone, nodes: list[Any], inputs: list[Any], device: torch.device,
            call: Callable[..., Any], opts: Options) -> tuple[list[Any], dict[str, Any], Any]:
    """The cone, whose sizes are symbolic, as a Region's op over its input tensors (it applies their steps
    itself, at each call's sizes); tuned at the first call of each size bucket, not here. Returns the nodes
    standing for its value, what the record says, and the Region, which keeps the record (`attach`)."""
    from prism.capture.dynamic import Region

    region = Region(nodes, inputs, cone.root, device, _options(device, opts))
    out = call(region.op.default, [n for n in inputs if isinstance(n.meta.get("val"), torch.Tensor)])
    out.meta["val"] = cone.root.meta["val"]
    return [out], {"program": str(region.program), "op": str(region.op), "chosen": "per size bucket, at run time",
                   "launches": None, "us": None, "measured": False, "cached": None, "search": None, "dropped": [],
                   "why": f"symbolic sizes {region.symbols}: lowered again at each new size, tuned once per size "
                          "bucket (prism.capture.dynamic)"}, region


def _options(device: torch.device, opts: Options) -> dict[str, Any]:
    """superoptimize's options for a cone."""
    return dict(budget=opts.budget, cache=opts.cache, search_options=dict(opts.search), compile=device.type == "cuda",
                pdl=opts.pdl)


def _inductor_config(opts: Options) -> dict[str, Any]:
    """Inductor's config for the rest: its CUDA graphs if asked for."""
    return {"triton.cudagraphs": True} if opts.cudagraphs else {}


def _shape(val: Any) -> list[Any]:
    return list(val.shape) if isinstance(val, torch.Tensor) else [val] if isinstance(val, torch.SymInt) else []


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


MOVES = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.expand.default",
                   "aten.t.default", "aten.transpose.int", "aten.permute.default", "aten.unsqueeze.default",
                   "aten.squeeze.dim", "aten.slice.Tensor", "aten.select.int", "aten.cat.default",
                   "aten.clone.default", "aten.alias.default", "getitem"})
"""ATen ops that only view or copy elements, into new tensors: a rest of these alone (Prism took every op that
computes; a decode step's KV-cache concatenation is left) runs as the ATen graph, since Inductor would spend
seconds compiling copies no faster than ATen's (g++ builds on a CPU), unless CUDA graphs are asked for
(Inductor records them)."""


def _inductor(gm: torch.fx.GraphModule, opts: Options, record: dict[str, Any]) -> bool:
    """Whether Inductor runs the rest of `gm` (`record` says when the options asked for it and it does not)."""
    if opts.rest == "eager":
        return False
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    if opts.cudagraphs or not all(n.meta.get("prism") or op_name(n) in MOVES for n in ops):
        return True
    record["rest"] = "the ATen graph as it is: no op outside Prism's computes (backend.MOVES)"
    return False


def _rest(gm: torch.fx.GraphModule, example_inputs: list[Any], opts: Options,
          record: dict[str, Any]) -> Callable[..., Any]:
    """What runs `gm` (Prism's ops in it): Inductor, or the ATen graph as it is; its launches go to `record`."""
    if not _inductor(gm, opts, record):
        return _counted(gm, record)
    from torch._functorch import config as functorch_config
    from torch._inductor.compile_fx import compile_fx

    with functorch_config.patch(enable_autograd_cache=False):  # a hit there would skip the inner compile's count
        return compile_fx(gm, example_inputs, config_patches=_inductor_config(opts), inner_compile=_inner(record))


def _counted(gm: torch.fx.GraphModule, record: dict[str, Any]) -> torch.fx.GraphModule:
    """`gm`, which runs as the ATen graph it is, with its launches per call in `record` (prism.capture.launches)."""
    record["launches"] = launches.summed(record["replaced"], launches.in_graph(gm), "the ATen graph's ops")
    return gm


def _inner(record: dict[str, Any], fuse: Callable[[torch.fx.GraphModule], torch.fx.GraphModule] | None = None
           ) -> Callable[..., Any]:
    """Inductor's inner compile of the rest, after `fuse` where Prism's fusion runs inside AOTAutograd (symbolic
    sizes), with the launches per call of the module it generates in `record` (prism.capture.launches): the first
    graph's, the forward, where AOTAutograd compiles more than one."""
    from torch._inductor.compile_fx import compile_fx_inner

    def inner(g: torch.fx.GraphModule, inputs: list[Any], **kw: Any) -> Any:
        compiled = compile_fx_inner(fuse(g) if fuse else g, inputs, **kw)
        source = getattr(compiled, "source_code", None)
        if "launches" not in record:
            rest = None if source is None else launches.in_code(source)
            record["launches"] = launches.summed(record["replaced"], rest, "Inductor's generated module")
        return compiled
    return inner


def register() -> None:
    """Register the backend as "prism" with torch.compile. Done when this module is imported (by `import
    prism` when torch is already imported, or `import prism.capture`), and through the package's
    `torch_dynamo_backends` entry point when Prism is installed: a checkout on PYTHONPATH has no entry point,
    and `import prism` before torch registers nothing."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    if "prism" not in _COMPILER_FNS and _BACKENDS.get("prism") is None:  # an entry point torch is loading
        register_backend(prism_backend, name="prism")                    # registers itself next


register()
