"""`torch.compile(model, backend="prism")` on the CPU: the decoder layer of examples/decoder_layer.py and small
modules compile, match eager, partition around ops Prism does not have, and a second compile (or a new
batch size) takes the result cache instead of searching again."""

from __future__ import annotations

import io
import operator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import prism.capture as pc
from prism.capture.backend import NOTHING_LEFT
from tests.conftest import example

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")



def _compile(module, *inputs):
    torch._dynamo.reset()
    with torch.no_grad():
        want = module(*inputs)
        got = torch.compile(module, backend="prism")(*inputs)
    return got, want, pc.history[-1]


def test_the_decoder_layer_compiles_fuses_and_matches_eager(options):
    layer, inputs = example("decoder_layer").example()
    got, want, record = _compile(layer, *inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    fused = [r["ops"] for r in record["replaced"]]
    assert len(fused) == 5, fused       # the norm with Q, K and V (one region); attention; output projection and
    assert sum("aten._softmax.default" in ops for ops in fused) == 1              # residual; norm + SwiGLU;
    assert sum("aten.silu.default" in ops for ops in fused) == 1                  # down projection and residual
    assert sum("aten.rsqrt.default" in ops for ops in fused) == 2
    (qkv,) = [r for r in record["replaced"] if r["ops"].count("aten.mm.default") == 3]
    assert qkv["root"].count(",") == 2 and qkv["launches"] == 1       # one kernel writes Q, K and V
    assert all(r["chosen"] != "unfused program" for r in record["replaced"]), [r["program"] for r in record["replaced"]]
    gpu = inputs[0].is_cuda   # each region's time: measured on a GPU, the cost model's estimate on a CPU
    assert all(r["us"] > 0 and r["measured"] == gpu for r in record["replaced"]), record["replaced"]
    left = {op for r in record["left"] for op in r["ops"]}
    assert left <= {"aten.view.default", "aten.cat.default", "aten.expand.default", "aten._unsafe_view.default"}, left

    # the same model again: every cone from the result cache, nothing searched or tuned
    got2, _, again = _compile(layer, *inputs)
    assert torch.equal(got2, got)
    assert len(again["replaced"]) == 5 and all(r["cached"] for r in again["replaced"])

    # another batch size: tuned afresh, the search results (size-free) from the cache
    layer, inputs = example("decoder_layer").example(batch=2)
    got3, want3, third = _compile(layer, *inputs)
    assert torch.allclose(got3, want3, rtol=1e-4, atol=1e-4)
    assert all(p["source"] == "search cache" for r in third["replaced"] for p in r["search"].get("parts", [r["search"]]))
    assert not third["replaced"][0]["cached"]  # tuned at the new shapes (K, V then reuse Q's: same program)


class Ranker(torch.nn.Module):
    """A SwiGLU followed by ops Prism does not have (sort, topk)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.up = torch.nn.Linear(32, 64, bias=False), torch.nn.Linear(32, 64, bias=False)

    def forward(self, x):
        y = F.silu(self.gate(x)) * self.up(x)
        return y.sort(-1).values[:, :8] + y.topk(4, -1).values.sum(-1, keepdim=True)


def test_unsupported_ops_stay_with_torch(options):
    torch.manual_seed(0)
    module, x = Ranker(), torch.randn(4, 32)
    got, want, record = _compile(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(record["replaced"]) == 1 and "aten.silu.default" in record["replaced"][0]["ops"]
    left = {op for r in record["left"] for op in r.get("ops", [])}
    assert {"aten.sort.default", "aten.topk.default"} <= left


def test_the_rest_can_go_to_inductor(options, monkeypatch):
    monkeypatch.setattr(pc.OPTIONS, "rest", "inductor")
    torch.manual_seed(1)
    module, x = Ranker(), torch.randn(4, 32)
    got, want, record = _compile(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(record["replaced"]) == 1


class Stacker(torch.nn.Module):
    """Two projections of x, each a cone of its own, concatenated: outside Prism's ops only views and a cat."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 16, bias=False), torch.nn.Linear(32, 24, bias=False)

    def forward(self, x):
        return torch.cat([F.silu(self.a(x)), self.b(x) * 2.0], dim=-1)


def _inductor_calls(monkeypatch) -> list:
    """compile_fx replaced by a stand-in that records its calls and runs the graph as it is."""
    import torch._inductor.compile_fx as fx

    calls = []
    monkeypatch.setattr(fx, "compile_fx", lambda gm, inputs, **kw: calls.append(kw) or gm)
    return calls


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_a_rest_of_views_and_copies_runs_without_inductor(options, monkeypatch, cudagraphs):
    """Inductor only where something outside Prism's ops computes, or where its CUDA graphs are asked for."""
    monkeypatch.setattr(pc.OPTIONS, "rest", "inductor")
    monkeypatch.setattr(pc.OPTIONS, "cudagraphs", cudagraphs)
    calls = _inductor_calls(monkeypatch)
    torch.manual_seed(0)
    got, want, record = _compile(Stacker(), torch.randn(4, 32))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(record["replaced"]) == 2
    assert {op for r in record["left"] for op in r["ops"]} == {"aten.cat.default"}
    assert len(calls) == cudagraphs
    assert ("rest" in record) != cudagraphs and "ATen graph" in record.get("rest", "ATen graph")

    calls.clear()
    got, want, record = _compile(Ranker(), torch.randn(4, 32))   # sort and topk compute: Inductor's
    assert len(calls) == 1 and "rest" not in record


def test_regions_are_superoptimized_concurrently_with_the_same_choices(options, monkeypatch):
    """Each region's program is superoptimized on a thread of its own (prism.capture.ahead), and the kernels
    chosen are those chosen one region after another."""
    import threading

    import prism.capture.ahead as ahead
    import prism.runtime.pipeline as pipeline

    monkeypatch.setattr(pc.OPTIONS, "cache", False)
    threads, real = [], pipeline.chosen
    monkeypatch.setattr(pipeline, "chosen", lambda *a, **k: threads.append(threading.current_thread().name)
                        or real(*a, **k))
    torch.manual_seed(0)
    module, x = Stacker(), torch.randn(4, 32)
    got, want, record = _compile(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(threads) == 2 and all(t.startswith("prism-ahead") for t in threads), threads

    monkeypatch.setattr(ahead.Ahead, "start", lambda self, cone: None)
    again, _, one_by_one = _compile(module, x)
    assert len(threads) == 2            # nothing started ahead: each replacement superoptimized in this thread
    assert torch.equal(again, got)
    assert [(r["root"], r["chosen"], r["us"]) for r in one_by_one["replaced"]] == \
        [(r["root"], r["chosen"], r["us"]) for r in record["replaced"]]


class Transposer(torch.nn.Module):
    """A matmul of a transposed intermediate: Prism views inputs only, so the cone is cut before the matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return F.silu(self.w((x * 2).t()))


def test_a_cone_cut_before_its_matmul_is_superoptimized_ahead_as_cut(options, monkeypatch):
    """The cut (the transpose and the product before it stay with torch) is made before the replacements
    too (prism.capture.ahead.Ahead.start), so the cone's program as cut is superoptimized on an ahead thread,
    not in the compiling thread after the other regions (a Llama's attention, after RoPE's products)."""
    import threading

    import prism.runtime.pipeline as pipeline

    monkeypatch.setattr(pc.OPTIONS, "cache", False)
    threads, real = [], pipeline.chosen
    monkeypatch.setattr(pipeline, "chosen", lambda *a, **k: threads.append(threading.current_thread().name)
                        or real(*a, **k))
    torch.manual_seed(0)
    got, want, record = _compile(Transposer(), torch.randn(32, 8))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(record["replaced"]) == 1 and "aten.silu.default" in record["replaced"][0]["ops"]
    assert any("cut from the cone" in r["why"] for r in record["left"])
    assert len(threads) == 1 and threads[0].startswith("prism-ahead"), threads


def test_a_superoptimization_that_fails_ahead_leaves_its_cone_to_torch(options, monkeypatch):
    """Its replacement raises what the thread raised (not superoptimizing again), and the cone stays with torch."""
    import threading

    import prism.runtime.pipeline as pipeline
    from prism.errors import PrismError

    monkeypatch.setattr(pc.OPTIONS, "cache", False)
    threads = []

    def fails(*args, **kwargs):
        threads.append(threading.current_thread().name)
        raise PrismError("no kernel today")

    monkeypatch.setattr(pipeline, "_chosen", fails)
    torch.manual_seed(0)
    got, want, record = _compile(Stacker(), torch.randn(4, 32))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert record["replaced"] == []
    assert sum("no kernel today" in r["why"] for r in record["left"]) == 2, record["left"]
    assert len(threads) == 2 and all(t.startswith("prism-ahead") for t in threads), threads


def test_a_cone_whose_best_is_the_unfused_program_stays_with_torch(options, monkeypatch):
    """A search limited to 2 block ops finds no fused kernel for either cone of Stacker: Prism's best would be its
    unfused program (one generated kernel per op), so torch keeps the ops, and the record says why."""
    monkeypatch.setattr(pc.OPTIONS, "search", {"time_limit": 60.0, "max_block_ops": 2})
    torch.manual_seed(0)
    got, want, record = _compile(Stacker(), torch.randn(4, 32))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert record["replaced"] == []
    whys = [r["why"] for r in record["left"] if "no fused kernel beat Prism's unfused program" in r["why"]]
    assert len(whys) == 2 and all("torch runs these ops" in w for w in whys), record["left"]
    assert all("no fused candidate: the search verified no sGraph within its limits (max_block_ops=2" in w
               for w in whys), whys                                     # which limit left no fused form


def test_a_graph_that_needs_gradients_is_left_to_torch(options):
    module, x = Ranker(), torch.randn(4, 32)
    torch._dynamo.reset()
    out = torch.compile(module, backend="prism")(x)
    out.sum().backward()
    record = pc.history[-1]
    assert record["replaced"] == [] and "inference-only" in record["left"][0]["why"]
    assert module.gate.weight.grad is not None


REGISTRATION = """
import torch
{first}
def f(x, w):
    return torch.relu(x @ w)
print(torch._dynamo.backends.registry.lookup_backend("prism").__name__)
"""


@pytest.mark.parametrize("first", ["", "import prism"])
def test_backend_prism_is_found_with_or_without_importing_prism(first, tmp_path):
    """Through the package's entry point (torch looks it up), or registered by `import prism`."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    from tests.child import child_env

    if not first and "prism" not in entry_points(group="torch_dynamo_backends").names:
        pytest.skip("prism is not pip-installed here, so torch has no entry point to find it by")

    done = subprocess.run([sys.executable, "-c", REGISTRATION.format(first=first)], capture_output=True, text=True,
                          env=child_env(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "prism_backend"


def test_compile_options_set_the_backends_options_for_that_compile(options):
    """torch.compile's `options` set any field of prism.capture.Options; `mode="reduce-overhead"` asks for CUDA
    graphs, which on a CPU graph are none, and the record says so. Each region says how many kernels it launches."""
    torch.manual_seed(0)
    module, x = Ranker(), torch.randn(4, 32)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(module, backend="prism", options={"rest": "eager", "budget": 1})(x)
    assert torch.allclose(got, module(x), rtol=1e-4, atol=1e-4)
    record = pc.history[-1]
    assert "cudagraphs" not in record and record["replaced"][0]["launches"] >= 1
    assert pc.OPTIONS.budget == 2          # the fixture's: a compile's options do not stay

    opts = pc.OPTIONS.configured({"rest": "inductor"}, "reduce-overhead")
    assert opts.cudagraphs and opts.rest == "inductor"
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(module, backend="prism", options={"rest": "inductor", "cudagraphs": True})(x)
    assert torch.allclose(got, module(x), rtol=1e-4, atol=1e-4)
    assert pc.history[-1]["cudagraphs"].startswith("none: the graph runs on cpu")


class Cached(torch.nn.Module):
    """A decode step's shape: a projection of a cache that the step writes in place, the cache's address fixed
    (transformers' StaticCache marks its tensors so)."""

    def __init__(self, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32, bias=False, device=device, dtype=dtype)
        self.cache = torch.zeros(4, 32, device=device, dtype=dtype)   # not a buffer: as transformers' caches
        torch._dynamo.mark_static_address(self.cache)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, x * torch.tensor(0.5))   # a constant: make_fx makes it an attribute
        return F.silu(self.proj(self.cache))


def _static_inputs(gm: torch.fx.GraphModule, n: int) -> list[int]:
    """The inputs AOTAutograd tells Inductor keep their addresses (what its CUDA graphs let a graph write), its
    inputs being `gm`'s parameters and buffers, then its n arguments."""
    try:
        from torch._functorch._aot_autograd.frontend_utils import _try_get_metadata_from_dynamo
    except ImportError:  # torch before 2.9 kept it here
        from torch._functorch.aot_autograd import _try_get_metadata_from_dynamo
    held = dict([*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)])
    return _try_get_metadata_from_dynamo(gm, held.keys(), len(held) + n, [])[1]


def test_the_rest_keeps_dynamos_static_inputs(options, monkeypatch):
    """The graph Prism hands Inductor marks the same inputs static as Dynamo's graph did (the cache the step
    writes, the weight): without the marks Inductor's CUDA graphs skip any decode step that writes its KV cache."""
    import prism.capture.backend as backend

    seen = []
    real = backend._rest
    monkeypatch.setattr(backend, "_rest", lambda gm, inputs, opts, record: seen.append((gm, len(inputs)))
                        or real(gm, inputs, opts, record))
    dynamo = []

    def first(gm, inputs):
        dynamo.append(_static_inputs(gm, len(inputs)))
        return backend.prism_backend(gm, inputs, {"rest": "inductor"})

    torch.manual_seed(0)
    module, x = Cached(), torch.randn(1, 32)
    torch._dynamo.reset()
    with torch.no_grad():
        want = Cached.forward(copy_of(module), x, torch.tensor([2]))
        got = torch.compile(module, backend=first)(x, torch.tensor([2]))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert pc.history[-1]["replaced"], pc.history[-1]["left"]
    (gm, n), = seen
    constants = len(list(gm.named_buffers()))
    assert constants and len(dynamo[0]) == 2
    assert _static_inputs(gm, n) == list(range(constants)) + [i + constants for i in dynamo[0]]


def copy_of(module: Cached) -> Cached:
    twin = Cached(module.cache.device.type, module.cache.dtype)
    twin.load_state_dict(module.state_dict())
    twin.cache = module.cache.clone()
    return twin


@pytest.mark.parametrize("options,mode,why", [
    ({"nope": 1}, None, "unknown"),
    ({}, "max-autotune", "mode 'max-autotune' unknown"),
    ({"cudagraphs": True, "rest": "eager"}, None, "rest must be 'inductor'"),
    ({"rest": "tvm"}, None, "'inductor' or 'eager'"),
    ({"background": True}, "reduce-overhead", "background and cudagraphs do not go together"),
    ({"pdl": "on"}, None, "pdl='on': it is True or False"),
])
def test_bad_compile_options_are_refused_by_name(options, mode, why):
    from prism.errors import InputError

    with pytest.raises(InputError, match=why):
        pc.OPTIONS.configured(options, mode)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU (this machine has none)")
def test_reduce_overhead_replays_prisms_ops_in_inductors_cuda_graphs(options, monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setattr(pc.OPTIONS, "rest", "inductor")
    torch.manual_seed(0)
    module, x = Ranker().cuda().half(), torch.randn(4, 32, device="cuda", dtype=torch.half)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        want = module(x)
        compiled = torch.compile(module, backend="prism", mode="reduce-overhead")
        outs = [compiled(x).clone() for _ in range(4)]      # warm-up, record, then replays
    for got in outs:
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert pc.history[-1]["cudagraphs"].startswith("Inductor records")
    assert len(pc.history[-1]["replaced"]) == 1
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])

    # a step that writes its (static) cache in place is captured too
    module = Cached("cuda", torch.half)
    x, pos = torch.randn(1, 32, device="cuda", dtype=torch.half), torch.tensor([2], device="cuda")
    twin = copy_of(module)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        want = twin(x, pos)
        compiled = torch.compile(module, backend="prism", mode="reduce-overhead")
        outs = [compiled(x, pos).clone() for _ in range(4)]
    for got in outs:
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(module.cache, twin.cache)
    assert pc.history[-1]["replaced"] and not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_a_region_is_tuned_for_its_inputs_layout(options):
    """A `Linear`'s weight reaches its region through a transpose: read as [in, out] with the input features
    contiguous, and the region is tuned for those strides (TuneOptions.strides), which its record says."""
    from prism.capture.views import Source

    torch.manual_seed(0)
    module, x = torch.nn.Linear(32, 48, bias=False), torch.randn(4, 32)
    module.forward = lambda t, f=module.forward: f(t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))
    got, want, record = _compile(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (region,) = record["replaced"]
    assert sorted(region["strides"]) == [(1, 32), (32, 1)]     # the weight [32, 48] read transposed; x row-major

    class Node:
        meta = {"val": torch.empty(48, 32)}
    assert Source(Node(), (("permute", (1, 0)),)).strides() == (1, 32)
    assert Source(Node(), (("permute", (1, 0)), ("view", (1536,)))).strides() == (1,)   # a copy: contiguous


def test_a_compile_says_what_it_does_as_it_goes(options, caplog):
    """At INFO (logger "prism.compile"): the graph as the backend gets it, before it is traced to ATen; the regions
    to superoptimize before any is waited for; each region as it is reached, before its replacement; and a
    summary last, which the graph's record keeps with each replaced region's Triton source file."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 16))
    with caplog.at_level("INFO", logger="prism.compile"):
        got, want, record = _compile(module, torch.randn(4, 16))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    said = [r.getMessage() for r in caplog.records if r.name == "prism.compile"]
    first = next(i for i, m in enumerate(said) if "region(s) to superoptimize in a graph of" in m)
    regions = [i for i, m in enumerate(said) if m.startswith("prism: region ")]
    replaced = [i for i, m in enumerate(said) if m.startswith("prism: replaced ")]
    assert said[0].startswith("prism: a graph of ") and "from Dynamo: tracing it to ATen" in said[0], said
    assert 0 < first < regions[0] < replaced[0] and len(regions) == len(record["replaced"]) == 2, said
    assert said[-1] == record["summary"] and record["summary"].startswith("prism: 2 region(s) fused, "), said
    for entry in record["replaced"]:     # each region's generated module, in the cache folder
        assert "@triton.jit" in Path(entry["source"]).read_text() and Path(entry["source"]).name.startswith("prism_")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_the_progress_line_is_for_a_terminal_only(terminal):
    from types import SimpleNamespace

    from prism.capture.watch import Watch

    stream = _Terminal() if terminal else io.StringIO()
    watch = Watch(12, progress=True, stream=stream)
    said_at_once = stream.getvalue()
    watch.regions(2, 9)
    watch.region(1, SimpleNamespace(name="mm_1", nodes=[0] * 3))
    summary = watch.done({"replaced": [{}], "left": [{}, {}]})
    assert summary.startswith("prism: 1 region(s) fused, 2 op(s) or part(s) left to torch, ")
    if terminal:       # said before any tracing: a large model's takes seconds
        assert said_at_once == "\r\033[Kprism: a graph of 12 op(s) from Dynamo: tracing it to ATen and finding its regions"
        assert stream.getvalue().startswith(said_at_once + "\r\033[Kprism: region 1/2: mm_1 (3 ops): searching and tuning (")
        assert stream.getvalue().endswith("\r\033[K" + summary + "\n")
    else:
        assert stream.getvalue() == ""          # a log file gets the INFO lines only, never carriage returns
    quiet = _Terminal()
    Watch(1, progress=False, stream=quiet).done({"replaced": [], "left": []})
    assert quiet.getvalue() == ""


def test_a_kernel_that_fails_at_run_time_leaves_its_cone_to_the_programs_torch_ops(options, monkeypatch):
    """A replaced cone whose kernels raise when the model runs (here every OptimizedGraph's) does not break the
    model: its op runs the cone's program as torch ops from then on, matches eager, and the cone's history entry
    says so ("at run time")."""
    from prism.runtime.optimized import OptimizedGraph

    def broken(self, tensors):
        raise RuntimeError("the launch failed")

    monkeypatch.setattr(OptimizedGraph, "run_op", broken)
    monkeypatch.setattr("prism.capture.guarded._GUARDS", {})    # the failed runners stay with this test
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.GELU(), torch.nn.Linear(24, 16))
    x = torch.randn(3, 16)
    got, want, record = _compile(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert record["replaced"] and all("its kernels raised RuntimeError: the launch failed" in r["at run time"]
                                      for r in record["replaced"]), record["replaced"]


@pytest.mark.parametrize("stage, target", [
    ("lowering", "prism.capture.backend.lower"),
    ("search", "prism.runtime.pipeline._cached_search"),
    ("tuning", "prism.runtime.pipeline.tune"),
    ("code generation", "prism.codegen.compile_graph"),
])
def test_a_failure_at_any_stage_of_a_compile_leaves_the_cone_to_torch(options, monkeypatch, stage, target):
    """A bug of Prism's at any stage of a cone's compile (here each stage raises in turn) never breaks the model:
    the cone stays with torch, the model matches eager, and history says it was an internal error."""
    def fail(*args, **kwargs):
        raise RuntimeError(f"a bug in {stage}")

    monkeypatch.setattr(target, fail)
    monkeypatch.setattr(pc.OPTIONS, "cache", False)    # a cached result would skip the search and the tuning
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.SiLU(), torch.nn.Linear(24, 16))
    got, want, record = _compile(module, torch.randn(3, 16))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert record["replaced"] == [], record["replaced"]
    whys = [r["why"] for r in record["left"] if r["what"].startswith("cone ending at")]
    assert len(whys) == 2 and all(f"internal error (RuntimeError: a bug in {stage})" in w for w in whys), \
        record["left"]


def test_torchs_rmsnorm_is_fused_with_its_projection(options):
    """nn.RMSNorm computes `x.pow(2).mean(-1, keepdim=True).add_(eps)`: the in-place add on an intermediate only
    it reads is taken out of place (partition.out_of_place), so the norm and the projection are one region."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.RMSNorm(64, eps=1e-6), torch.nn.Linear(64, 32, bias=False))
    got, want, record = _compile(module, torch.randn(4, 64))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (region,) = record["replaced"]
    assert {"aten.mean.dim", "aten.add.Scalar", "aten.rsqrt.default", "aten.mm.default"} <= set(region["ops"])
    assert not record["left"], record["left"]


def test_only_in_place_ops_on_intermediates_read_by_nothing_else_are_taken_out_of_place():
    from prism.capture.partition import out_of_place

    aten = torch.ops.aten

    def f(x, w):
        y = aten.mul.Tensor(x, x)
        z = aten.add_.Scalar(y, 1.0)                 # y read by nothing else: out of place
        v = aten.mul.Tensor(x, w)
        u = aten.mul_.Tensor(v, z)                   # v is read again below: stays
        s = aten.add.Tensor(u, v)
        aten.mul_.Tensor(x, s)                       # an input: its mutation is seen by the caller, stays
        t = aten.zeros_like.default(x)
        aten.copy_.default(aten.select.int(t, 0, 1), s[0])   # a view of t: writing it changes t, stays (RWKV)
        return s, t

    graph = torch.fx.symbolic_trace(f).graph
    assert out_of_place(graph) == 1
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    assert targets == [aten.mul.Tensor, aten.add.Scalar, aten.mul.Tensor, aten.mul_.Tensor, aten.add.Tensor,
                       aten.mul_.Tensor, aten.zeros_like.default, aten.select.int, operator.getitem,
                       aten.copy_.default]
    x, w = torch.randn(3, 4), torch.randn(3, 4)
    want = f(x.clone(), w)
    graph.eliminate_dead_code()   # as the backend does after: an op made out of place whose value is unread goes
    got = torch.fx.GraphModule(torch.nn.Module(), graph)(x.clone(), w)
    for g, v in zip(got, want):
        torch.testing.assert_close(g, v)


class _OnePlusWeightNorm(torch.nn.Module):
    """Gemma's RMSNorm: the normalized row scaled by 1 + weight, in float32."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.1)

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return (out * (1.0 + self.weight.float())).type_as(x)


def test_a_norm_scaled_by_one_plus_weight_is_fused_with_its_projection(options):
    """`1 + weight` is a vector computed in the cone, which Prism cannot broadcast against the rows as an
    intermediate: torch computes it (one op, detached from the cone, `Cone.detach`) and the cone reads it as an
    input, so the norm and the projection are still one region, not cut off before the matmul."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(_OnePlusWeightNorm(64), torch.nn.Linear(64, 32, bias=False))
    got, want, record = _compile(module, torch.randn(4, 64))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (region,) = record["replaced"]
    assert {"aten.mean.dim", "aten.rsqrt.default", "aten.mm.default"} <= set(region["ops"])
    (left,) = record["left"]
    assert left["ops"] == ["aten.add.Tensor"] and left["what"].startswith("1 op(s) detached from the cone"), left


class _LayerNorm1P(torch.nn.Module):
    """Nemotron's layernorm1p: a layer norm whose weight is `1 + w`."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight, self.bias = (torch.nn.Parameter(torch.randn(d) * 0.1) for _ in range(2))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight + 1, self.bias, 1e-5)


def test_a_layer_norm_of_an_input_with_weight_one_plus_w_is_fused_with_its_projection(options):
    """`1 + w` is the only operand of the norm that the cone computes (x is an input): torch computes it and the
    norm and projection are one region, not cut off before the matmul."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(_LayerNorm1P(64), torch.nn.Linear(64, 32, bias=False))
    got, want, record = _compile(module, torch.randn(4, 64))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (region,) = record["replaced"]
    assert {"aten.native_layer_norm.default", "aten.mm.default"} <= set(region["ops"])
    (left,) = record["left"]
    assert left["ops"] == ["aten.add.Tensor"] and left["what"].startswith("1 op(s) detached from the cone"), left


def test_a_cone_is_detached_from_only_at_one_of_its_nodes():
    """`Cone.detach` of a node that is not the cone's (an UnsupportedOp that names none, or a node cut away)
    is None, so the backend cuts instead (a dynamic graph's cone once failed whole on it)."""
    from prism.capture.partition import Cone

    graph = torch.fx.symbolic_trace(lambda x, w: torch.ops.aten.mm.default(x * 2, w + 1)).graph
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    cone = Cone([nodes[-1]], nodes)
    assert cone.detach(None) is None and cone.detach(next(iter(graph.nodes))) is None
    left, rest = cone.detach(nodes[-1])
    assert len(left) == 1 and len(rest.nodes) == 2 and rest.matmuls == 1


class _TwoDimNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = torch.nn.LayerNorm((4, 16)), torch.nn.Linear(16, 32)

    def forward(self, x):
        return self.proj(self.norm(x).relu())


def test_a_cut_at_an_op_of_several_results_leaves_its_pieces_with_it(options):
    """A layer_norm over two dims is not Prism's: the cut leaves it to torch together with its getitem (the
    cone reads that piece, a tensor, not native_layer_norm's tuple), and the rest of the cone is fused."""
    torch.manual_seed(0)
    got, want, record = _compile(_TwoDimNorm(), torch.randn(3, 4, 16))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (region,) = record["replaced"]
    assert {"aten.relu.default", "aten.addmm.default"} <= set(region["ops"]), region["ops"]
    (cut,) = [r for r in record["left"] if r["what"].startswith("2 op(s) cut")]
    assert set(cut["ops"]) == {"getitem", "aten.native_layer_norm.default"} and "over 2 dims" in cut["why"], cut


def test_a_cone_left_for_its_unfused_program_names_the_best_fused_candidate_and_each_form():
    """Where the unfused program wins, the reason says how near the fused forms came (the best fused candidate
    and the model's best point of each form), so a lost cone says which form fell short."""
    from types import SimpleNamespace

    from prism.capture.backend import NOTHING_LEFT, _fused
    from prism.errors import PrismError
    from prism.tune import COST_MODEL, Report
    from prism.tune.report import UNFUSED, Entry, Status
    from prism.tune.space import Candidate

    report = Report(COST_MODEL, "H100", chosen=1, reason="lowest cost-model estimate", entries=[
        Entry(Candidate(3, (4,), 1), "model", 9.5, status=Status.OK),
        Entry(Candidate(UNFUSED, (), 1), "baseline", 7.25, status=Status.CHOSEN),
        Entry(Candidate(5, (2,), 2), "model", 8.0, status=Status.DROPPED, why="spills")])
    report.forms = {"split-K": {"graphs": 2, "estimate_us": 9.5, "best": "#3 grid(x=4)", "safe": True}}
    with pytest.raises(PrismError) as e:
        _fused(SimpleNamespace(report=report))
    why = str(e.value)
    assert "(7.25 µs estimated; lowest cost-model estimate); the best fused candidate, #3 grid(x=4) loop=1" in why
    assert "9.50 µs; forms, the cost model's best of each: split-K (2 sGraphs) 9.50 us #3 grid(x=4)" in why


class NormedHeads(torch.nn.Module):
    """An RMSNorm of rows and a projection whose output is split into heads and transposed, then scaled: the cone of
    the scaling reaches back through the transpose (of an intermediate, which Prism cannot view)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(32) + 0.5)
        self.a = torch.nn.Linear(32, 48, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return self.a(h).view(2, 4, 3, 16).transpose(1, 2) * 2.0


def test_a_cut_that_leaves_no_matmul_takes_the_part_before_it_as_a_cone(options):
    """The transpose cannot be lowered and a cut there takes the projection with it, leaving the scaling without a
    matmul: the norm and projection before the transpose are then a cone of their own, and fused."""
    torch.manual_seed(0)
    got, want, record = _compile(NormedHeads(), torch.randn(8, 32))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    (replaced,) = record["replaced"]
    assert {"aten.mm.default", "aten.rsqrt.default", "aten.mean.dim"} <= set(replaced["ops"]), replaced["ops"]
    whys = [r["why"] for r in record["left"]]
    assert any("a permute of an intermediate" in w for w in whys) and NOTHING_LEFT in whys, whys
    cut = next(r for r in record["left"] if "a permute of an intermediate" in r["why"])
    assert "aten.transpose.int" in cut["ops"] and "aten.mm.default" not in cut["ops"], cut   # the cone's, not torch's


class HeadNormedQK(torch.nn.Module):
    """Qwen3's attention inputs: Q and K projected from the normed rows, a norm over each head with a weight of its
    own, then the heads' transpose (of an intermediate, which Prism cannot view)."""

    def __init__(self, d: int = 32, head: int = 8) -> None:
        super().__init__()
        self.head, self.q, self.k = head, torch.nn.Linear(d, d, bias=False), torch.nn.Linear(d, d // 2, bias=False)
        self.qw, self.kw = torch.nn.Parameter(torch.rand(head) + 0.5), torch.nn.Parameter(torch.rand(head) + 0.5)

    def forward(self, x):
        def norm(v):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)

        b, s, _ = x.shape
        h = norm(x)
        q = norm(self.q(h).view(b, s, -1, self.head)) * self.qw
        k = norm(self.k(h).view(b, s, -1, self.head)) * self.kw
        return q.transpose(1, 2), k.transpose(1, 2)


def test_a_norm_a_cut_leaves_without_a_matmul_is_a_region_of_its_own(options):
    """Cut at the transpose (K) or at the projection (Q, whose operand the head norm holds in the head's dims), each
    head norm is left without a matmul: it still reduces, so it is a region of its own, after its projection's."""
    torch.manual_seed(0)
    got, want, record = _compile(HeadNormedQK(), torch.randn(2, 4, 32))
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-4), (g - w).abs().max()
    norms = [r for r in record["replaced"] if "aten.mm.default" not in r["ops"]]
    assert len(norms) == 2 and all("aten.rsqrt.default" in r["ops"] for r in norms), record["replaced"]
    assert sum("aten.mm.default" in r["ops"] for r in record["replaced"]) == 2, record["replaced"]
    left = {op for r in record["left"] for op in r["ops"]}
    assert not left & {"aten.rsqrt.default", "aten.mean.dim", "aten.mm.default"}, record["left"]


def test_torchs_own_encoder_layer_fuses_the_norm_after_attention(options):
    """nn.TransformerEncoderLayer (MultiheadAttention, then LayerNorm; in training mode without dropout, so that
    torch's fused fast path is not taken): the output projection's result is permuted back to batch first, which
    Prism cannot take, and the cut leaves the residual add and the LayerNorm without a matmul. They reduce, so
    they are a region of their own, and the projection before the permute is one too."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True).train()
    got, want, record = _compile(layer, torch.randn(2, 8, 64))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    norms = [r["ops"] for r in record["replaced"] if "aten.native_layer_norm.default" in r["ops"]]
    assert len(norms) == 2 and any("aten.addmm.default" not in ops for ops in norms), record["replaced"]
    left = {op for r in record["left"] for op in r["ops"]}
    assert not left & {"aten.native_layer_norm.default", "aten.addmm.default", "aten.mm.default"}, record["left"]
