"""The lean call path, as far as it can be checked without a GPU: the bound arguments are exactly what the
generated launchers pass, the cached signature refuses what it was not bound for, the workspace plan,
and the custom op under torch.compile (CPU fallback behind the same op). tests/runtime/test_gpu.py runs
all of it on a GPU."""

from __future__ import annotations

import pytest
import torch

import prism
from prism.codegen import compile_graph
from prism.codegen.direct_launch import ALIGN, BoundGraph
from prism.errors import InputError
from prism.codegen.plan import BUFFER_DTYPES
from prism.runtime import superoptimize

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")

ATT = {"b": 2, "g": 4, "h": 32, "d": 16}


class _Kernel:
    """Stands in for Triton's CompiledKernel: records launches."""

    def __init__(self) -> None:
        self.function, self.packed_metadata, self.calls = object(), object(), []

    def run(self, *args):
        self.calls.append(args)


class _Jit:
    """Stands in for a @triton.jit function: `fn[grid](*args, **meta)` records and returns a _Kernel."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.calls.append((grid, args, meta))
            return _Kernel()
        return launch


def _generic_launch(cg, xs, monkeypatch):
    """Run the generated launchers on CPU tensors with recording kernels; return (buffers, jits, kernels)."""
    module = cg.module
    jits = {s.kernel.name: _Jit() for s in cg.plan.steps}
    for name, jit in jits.items():
        monkeypatch.setattr(module, name, jit)
    bufs = list(xs) + [torch.zeros(b.shape, dtype=BUFFER_DTYPES[b.dtype]) for b in cg.plan.buffers[len(xs):]]
    kernels = [getattr(module, s.kernel.launcher)(*(bufs[j] for j in s.inputs + s.outputs)) for s in cg.plan.steps]
    return bufs, jits, kernels


def _kept(cg, bufs):
    """The plan's persistent buffers (a tail kernel's row counters) among `bufs`."""
    return {j: bufs[j] for j, b in enumerate(cg.plan.buffers) if b.persistent}


FORMS = {"two kernels": dict(splits=2), "tail": dict(online=True, splits=2, loop=2, partials=True, tail=True)}
"""Attention's split form (kernel 2 launched on its own), and the safe split form with kernel 2 as the tail."""


@pytest.mark.parametrize("form", FORMS)
def test_bound_arguments_are_exactly_the_launchers(tmp_path, monkeypatch, form):
    """Attention's kernels: pointers, then every stride and constexpr, in the kernel's parameter order; the row
    counters (a split-K combine's, a tail kernel's) at the address of the buffer kept between calls."""
    w = prism.workloads.get("attention")
    cg = compile_graph(w.fused(ATT, **FORMS[form]))
    xs = w.inputs(ATT, seed=0)
    bufs, jits, kernels = _generic_launch(cg, xs, monkeypatch)
    kept = _kept(cg, bufs)
    assert kept    # the split's row counters (prism.codegen.split), or the tail's
    with pytest.raises(RuntimeError, match="persistent"):
        BoundGraph(cg.plan, xs, kernels, {})
    bound = BoundGraph(cg.plan, xs, kernels, kept)
    assert len(bound.launches) == len(cg.plan.steps) == (1 if form == "tail" else 2)
    addresses = bound.addresses(xs)
    assert all(addresses[j] == t.data_ptr() for j, t in kept.items())
    assert not set(kept) & {j for j, _ in bound.offsets}             # not in the per-call workspace
    for step, launch in zip(cg.plan.steps, bound.launches):
        ((grid, args, meta),) = jits[step.kernel.name].calls
        assert launch.grid == tuple(grid) + (1,) * (3 - len(grid))
        pointers = [a for a in args if isinstance(a, torch.Tensor)]
        assert [bufs[j] for j in launch.slots] == pointers or all(
            p is bufs[j] for p, j in zip(pointers, launch.slots))
        assert list(launch.trailing) == list(args[len(pointers):]) + [v for k, v in meta.items() if k != "num_warps"]
        assert len(launch.slots) + len(launch.trailing) == len(step.kernel.signature)


@pytest.mark.parametrize("case", ["runtime_attention_kv", "runtime_rmsnorm_linear"])
def test_kernels_with_runtime_sizes_are_bound_per_size(monkeypatch, case):
    """A plan whose kernels take sizes at launch, sized by Plan.at, binds the extents, trip counts and grid the
    generated launcher counts from the tensors at that size; the bound signature refuses the other sizes (they
    take the generic path, or a plan sized for them)."""
    from prism.codegen import CompiledGraph
    from prism.codegen.plan import plan_graph
    from tests.codegen.ragged_cases import RUNTIME

    c = RUNTIME[case]()
    plan = plan_graph(c.graph, sizes=c.sizes)
    bound = []
    for k in [c, *c.others[:2]]:
        cg = CompiledGraph(k.graph, plan.at({n: k.graph.inputs[i].shape[d] for (i, d), n in c.sizes.items()}))
        _, jits, kernels = _generic_launch(cg, k.inputs, monkeypatch)
        bound.append(BoundGraph(cg.plan, k.inputs, kernels))
        (launch,), (step,) = bound[-1].launches, cg.plan.steps
        ((grid, args, meta),) = jits[step.kernel.name].calls
        pointers = [a for a in args if isinstance(a, torch.Tensor)]
        assert launch.grid == tuple(grid) + (1,) * (3 - len(grid)) == step.kernel.grid_at(
            [t.shape for t in pointers]) + (1,) * (3 - len(grid))
        assert list(launch.trailing) == list(args[len(pointers):]) + [v for n, v in meta.items() if n != "num_warps"]
    assert len({(b.launches[0].grid, b.launches[0].trailing) for b in bound}) == len(bound)
    assert bound[0].accepts(c.inputs) and not bound[0].accepts(c.others[0].inputs)


def test_intermediates_live_in_one_workspace_and_the_row_counters_are_kept(monkeypatch):
    """Split-KV sums combined in their launch (prism.codegen.split): the partials live in the per-call workspace,
    the row counters are kept between calls (the caller's `kept`), and nothing is zeroed per call."""
    w = prism.workloads.get("attention")
    cg = compile_graph(w.fused(ATT, splits=2))           # split-KV partial sums: summed across 2 blocks
    xs = w.inputs(ATT, seed=0)
    _, _, kernels = _generic_launch(cg, xs, monkeypatch)
    kept = {j: torch.zeros(b.shape, dtype=torch.int32) for j, b in enumerate(cg.plan.buffers) if b.persistent}
    bound = BoundGraph(cg.plan, xs, kernels, kept)
    inter = [j for j, _ in bound.offsets]
    assert inter and set(inter).isdisjoint(cg.plan.inputs) and set(inter).isdisjoint(cg.plan.outputs)
    assert kept and set(inter).isdisjoint(kept)
    assert all(off % ALIGN == 0 for _, off in bound.offsets)
    assert [j for j, *_ in bound.outputs] == list(cg.plan.outputs)


def test_the_cached_signature_refuses_what_it_was_not_bound_for(monkeypatch):
    w = prism.workloads.get("rmsnorm")
    cfg = {"n": 4, "d": 64}
    cg = compile_graph(w.fused(cfg))
    xs = w.inputs(cfg, seed=0)
    _, _, kernels = _generic_launch(cg, xs, monkeypatch)
    bound = BoundGraph(cg.plan, xs, kernels)
    x, wt = xs
    assert bound.accepts([x.clone(), wt.clone()])
    assert not bound.accepts([x])                                         # count
    assert not bound.accepts([x[:2], wt])                                 # shape
    assert not bound.accepts([x.float(), wt])                             # dtype
    assert not bound.accepts([x, wt.t().contiguous().t()])                # strides
    cuda0 = BoundGraph(cg.plan, xs, kernels)
    cuda0.index = 0                                                       # as if bound on cuda:0
    assert not cuda0.accepts([x, wt])                                     # device
    odd = torch.empty(x.numel() + 1, dtype=x.dtype)[1:].view(x.shape)     # 2-byte aligned data
    assert not bound.accepts([odd, wt])
    assert not bound.accepts([x.tolist(), wt])


@pytest.fixture(scope="module")
def opt_cpu(tmp_path_factory):
    from prism.search import search

    w = prism.workloads.get("swiglu")
    cfg = {"n": 4, "d": 64}
    result = search(w.build(cfg), workers=1, max_block_ops=9, max_grid=1)
    return w, cfg, superoptimize(w.build(cfg), search_result=result, budget=2, compile=False, cache=False,
                                 device="cpu")


def test_a_changed_signature_gets_the_usual_clear_error(opt_cpu):
    w, cfg, opt = opt_cpu
    xs = w.inputs(cfg, seed=0)
    with pytest.raises(InputError, match="should have shape"):
        opt(xs[0][:2], *xs[1:])
    with pytest.raises(InputError, match="should have dtype float16"):
        opt(xs[0].float(), *xs[1:])
    with pytest.raises(InputError, match="on meta"):
        opt(xs[0].to("meta"), *xs[1:])


def test_inference_only_and_positional_only(opt_cpu):
    w, cfg, opt = opt_cpu
    xs = w.inputs(cfg, seed=0)
    with pytest.raises(InputError, match="requires grad, but this optimized graph is inference-only"):
        opt(xs[0].float().requires_grad_().half(), *xs[1:])
    with torch.no_grad():                                 # harmless without grad
        assert opt(xs[0].float().requires_grad_().half(), *xs[1:])[0].shape == (4, 64)
    with pytest.raises(InputError, match="by position"):
        opt(*xs, X=xs[0])


def test_the_custom_op_computes_what_the_call_does(opt_cpu):
    """On the CPU the call runs the chosen µGraph in the reference executor and the op runs the program as torch ops
    (OptimizedGraph.run_op): each is exactly its path, and the two, proved equal, differ by rounding only."""
    from prism import interp
    from prism.tune.profile import close

    w, cfg, opt = opt_cpu
    xs = w.inputs(cfg, seed=1)
    (via_op,) = opt.op(list(xs))
    (direct,) = opt(*xs)
    assert torch.equal(via_op, interp.program_fn(opt.program)(list(xs))[0])
    assert torch.equal(direct, interp.run(opt.graph, list(xs))[0].to(direct.dtype))
    assert close(via_op, direct)[0]
    assert opt.op is opt.op and "prism" in str(opt.op)


def test_the_custom_ops_outputs_are_laid_out_as_its_fake_ones(opt_cpu):
    """Inductor asserts an op's outputs have its fake outputs' strides (contiguous), and the program run as torch
    ops can end in a view: a CPU bmm of two transposed operands returns a transposed result (OLMo-Hybrid)."""
    from prism.runtime.torch_op import runner_op

    w, cfg, opt = opt_cpu

    class Transposed:
        def run_op(self, xs):
            return [y.t().contiguous().t() for y in opt.run_op(xs)]

    xs = w.inputs(cfg, seed=3)
    (y,) = runner_op("test_transposed_result", opt.graph, Transposed())(list(xs))
    with torch._subclasses.FakeTensorMode() as mode:
        (fake,) = opt.op([mode.from_tensor(x) for x in xs])
    assert y.stride() == fake.stride()
    assert torch.equal(y, opt.run_op(xs)[0])


def test_torch_compile_fullgraph_traces_the_call_as_the_custom_op(opt_cpu):
    """No graph break (fullgraph=True) around an OptimizedGraph call; torch code before and after it."""
    import torch._dynamo

    w, cfg, opt = opt_cpu
    xs = w.inputs(cfg, seed=2)

    def layer(x, wg, wu):
        return opt(x * 1.0, wg, wu)[0].float().relu() + 1

    torch._dynamo.reset()
    counts = torch._dynamo.utils.counters
    counts.clear()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(*xs)
    assert torch.equal(got, layer(*xs))
    assert not counts["graph_break"]
    ops = [str(n.target) for g in _graphs(compiled, xs) for n in g.graph.nodes if n.op == "call_function"]
    assert any("prism" in o for o in ops), ops


def _graphs(compiled, xs):
    """The FX graphs dynamo made for `compiled` at `xs` (through torch._dynamo.explain)."""
    import torch._dynamo

    return torch._dynamo.explain(compiled._torchdynamo_orig_callable)(*xs).graphs


def test_cuda_graphs_need_the_gpu(opt_cpu):
    w, cfg, opt = opt_cpu
    with pytest.raises(InputError, match="CUDA graphs need the GPU"):
        opt.cuda_graph(*w.inputs(cfg, seed=0))


def test_the_c_launcher_builds_and_refuses_bad_plans():
    from prism.codegen import native

    module = native.load()
    if module is None:
        pytest.skip(f"the C launcher cannot be built on this machine: {native.why_not()}")
    with pytest.raises(ValueError, match="unknown parameter kind"):
        module.make((("kernel", 1, 1, 1, 1, 32, 0, (("float", 1.0),)),))
    with pytest.raises(TypeError):
        module.make((("kernel", 1),))
    assert module.make(()) is not None


@pytest.mark.parametrize("form", FORMS)
def test_c_launcher_plans_follow_the_compiled_signatures(monkeypatch, form):
    """Attention's kernels compiled ahead of time for sm_90: the plan passes each kernel every runtime parameter
    (pointers by buffer slot) in its compiled order."""
    from types import SimpleNamespace

    import triton
    from triton.compiler import ASTSource

    from prism.codegen import default_target
    from prism.codegen.direct_launch import native_steps

    w = prism.workloads.get("attention")
    cg = compile_graph(w.fused(ATT, **FORMS[form]))
    real = {s.kernel.name: getattr(cg.module, s.kernel.name) for s in cg.plan.steps}
    xs = w.inputs(ATT, seed=0)
    bufs, _, fakes = _generic_launch(cg, xs, monkeypatch)
    bound = BoundGraph(cg.plan, xs, fakes, _kept(cg, bufs))
    assert bound.native is None                        # stand-in kernels: no compiled signature
    compiled = []
    for step in cg.plan.steps:
        k = triton.compile(ASTSource(real[step.kernel.name], dict(step.kernel.signature),
                                     dict(step.kernel.constexprs)),
                           target=default_target(), options={"num_warps": step.kernel.num_warps})
        compiled.append(SimpleNamespace(src=k.src, metadata=k.metadata, function=1000 + len(compiled)))
    steps = native_steps(bound.launches, compiled)
    assert len(steps) == len(cg.plan.steps) > 0         # nothing to zero per call: kernels only
    for (kind, function, gx, gy, gz, threads, shared, params), launch, k, step in zip(
            steps, bound.launches, compiled, cg.plan.steps):
        assert kind == "kernel" and function == k.function and (gx, gy, gz) == launch.grid
        assert threads == 32 * step.kernel.num_warps and shared == k.metadata.shared
        runtime = [n for n, ty in step.kernel.signature.items() if ty != "constexpr"]
        assert len(params) == len(runtime)
        assert [p for p in params if p[0] == "ptr"] == [("ptr", j) for j in launch.slots]
        assert all(p[0] == "i32" for p in params if p[0] != "ptr")
    from prism.codegen import native

    if native.load() is not None:                      # and the C side takes the plan
        assert native.load().make(steps) is not None
