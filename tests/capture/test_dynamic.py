"""`torch.compile(backend="prism")` on graphs whose sizes are symbolic: one op per cone for every size, lowered
again at each new size and tuned once per size bucket (prism.capture.dynamic)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch

import prism.capture as pc
import prism.runtime.pipeline as pipeline
from prism.capture import dynamic
from tests.child import interpreted
from tests.conftest import example

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def searches(monkeypatch):
    """Every search the optimizer runs (result-cache hits are not searches)."""
    done: list[int] = []
    real = pipeline._search
    monkeypatch.setattr(pipeline, "_search", lambda *a: done.append(1) or real(*a))
    return done


def test_dynamic_batch_sizes_run_through_one_compiled_graph(options):
    torch.manual_seed(0)
    lin = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 16))
    torch._dynamo.reset()
    start = len(pc.history)
    f = torch.compile(lin, backend="prism", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 9, 17, 33, 40):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), lin(x))
    (record,) = pc.history[start:]
    assert len(record["replaced"]) == 2 and all("per size bucket" in r["chosen"] for r in record["replaced"])


def test_a_layer_norm_with_symbolic_sizes_is_fused_as_inductor_decomposes_it(options, monkeypatch):
    """A LayerNorm before a Linear, sizes symbolic, the rest Inductor (the default): AOTAutograd first asks Dynamo
    to trace again (the eps, a float, became a tensor: RestartAnalysis, which is not a failure), and Inductor's
    decompositions give var_mean, which is Prism's: one region, nothing left to torch, eager's values."""
    monkeypatch.setattr(pc.OPTIONS, "rest", "inductor")
    torch.manual_seed(0)
    record = _dynamic_record(torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 16)), 32, (3, 9))
    assert record["left"] == [] and len(record["replaced"]) == 1, record


def test_a_gelu_mlp_with_symbolic_sizes_is_fused_as_inductor_decomposes_it(options, monkeypatch):
    """Inductor's decompositions spell the exact GELU with erf, which Prism has only inside that spelling
    (prism.capture.lower.SPELLINGS): the MLP's two projections and its GELU are Prism's, nothing is left to
    torch, and the values are eager's."""
    monkeypatch.setattr(pc.OPTIONS, "rest", "inductor")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    record = _dynamic_record(mlp, 32, (3, 9))
    assert record["left"] == [], record["left"]
    assert "aten.erf.default" in {op for r in record["replaced"] for op in r["ops"]}, record["replaced"]


def _dynamic_record(fn, features: int, rows: tuple[int, ...]) -> dict:
    """`fn` compiled with dynamic sizes and called on an [n, features] input for each n of `rows`, matching eager
    at each: the compile's history record."""
    torch._dynamo.reset()
    dynamic._BUCKETS.clear()
    start = len(pc.history)
    f = torch.compile(fn, backend="prism", dynamic=True)
    with torch.no_grad():
        for n in rows:
            x = torch.randn(n, features)
            torch.testing.assert_close(f(x), fn(x))
    (record,) = pc.history[start:]
    return record


def _silu_linear_at(features: int, rows: tuple[int, ...]) -> dict:
    """silu(x Wᵀ) (W: [features/2, features]) through `_dynamic_record`."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(features, features // 2, bias=False)
    return _dynamic_record(lambda x: torch.nn.functional.silu(lin(x)), features, rows)


def test_a_size_prism_fails_on_runs_torchs_ops_and_history_says_so(options, monkeypatch):
    """A size whose tuning or kernels raise a PrismError (here: the bucket raises a MappingError at 5 rows, as a
    choice whose tiles cannot split a new batch did) is never the user's error: that size runs the cone's ATen
    ops, matches eager, and the cone's history entry names the size and the error; other sizes run Prism's."""
    from prism.errors import MappingError
    from prism.runtime.buckets import SizeBuckets

    real = SizeBuckets.get

    def get(self, program):
        if program.inputs[0].shape[0] == 5:
            raise MappingError("dim 0 of size 5 cannot be split into 3 equal tiles")
        return real(self, program)

    monkeypatch.setattr(SizeBuckets, "get", get)
    record = _silu_linear_at(16, (3, 5, 9, 5))
    (entry,) = record["replaced"]
    assert len(entry["torch at"]) == 1 and "=5: MappingError: dim 0 of size 5" in entry["torch at"][0], entry


def test_a_bucket_whose_best_is_the_unfused_program_runs_the_cones_aten_ops(options, monkeypatch):
    """A search limited to 2 block ops finds no fused kernel: each size bucket's best is Prism's unfused program,
    so the Region runs the cone's own ATen ops instead (as the backend leaves such a cone of fixed sizes to
    torch), at every size, and matches eager."""
    monkeypatch.setattr(pc.OPTIONS, "search", {"time_limit": 60.0, "max_block_ops": 2})
    ran = []
    real = dynamic.Region._aten
    monkeypatch.setattr(dynamic.Region, "_aten", lambda self, xs, b: ran.append(dict(b)) or real(self, xs, b))
    record = _silu_linear_at(32, (3, 5, 9))
    assert len(record["replaced"]) == 1 and "per size bucket" in record["replaced"][0]["chosen"]
    assert sorted(v for b in ran for v in b.values()) == [3, 5, 9], ran


def test_a_decode_loop_with_a_growing_kv_cache_compiles_twice_and_searches_each_region_once(options, searches,
                                                                                            tmp_path, monkeypatch):
    """64 steps, the KV cache one longer each step: Dynamo compiles the first step's sizes, then once more with the
    length symbolic; every region kind is searched once (the dynamic graph's from the result cache) and tuned
    once per size bucket of the lengths it sees."""
    monkeypatch.setattr(options, "cache", tmp_path / "results")   # a cache of its own: the first compile searches
    dl = example("decoder_layer")
    layer, (x, k, v) = dl.example(batch=2, length=4)
    torch._dynamo.reset()
    dynamic._BUCKETS.clear()
    start = len(pc.history)
    f = torch.compile(layer, backend="prism")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for step in range(64):
            torch.testing.assert_close(f(x, k, v), layer(x, k, v), rtol=1e-5, atol=1e-5)
            if step == 0:
                first = len(searches)
            k = torch.cat([k, torch.randn(k.shape[0], 1, k.shape[2], generator=gen) / 4], dim=1)
            v = torch.cat([v, torch.randn(v.shape[0], 1, v.shape[2], generator=gen)], dim=1)
    graphs = pc.history[start:]
    assert len(graphs) == 2
    assert len(searches) == first > 0                      # the dynamic graph searched nothing
    kinds = {r["program"] for r in graphs[0]["replaced"]}
    assert len(graphs[1]["replaced"]) == len(graphs[0]["replaced"]) and len(kinds) >= 3
    tunings = [n for b in dynamic._BUCKETS.values() for n in b.tunings.values()]
    assert tunings and set(tunings) == {1}                   # one tuning per region kind and size bucket


def test_a_constant_that_depends_on_a_dynamic_size_leaves_the_cone_to_torch(options):
    """mean over the dynamic rows is sum · 1/n: right at one n only, so that cone stays with torch, and says why."""
    torch.manual_seed(0)
    w = torch.randn(16, 8)

    def f(x):
        return (x @ w).mean(0)
    torch._dynamo.reset()
    start = len(pc.history)
    g = torch.compile(f, backend="prism", dynamic=True)
    with torch.no_grad():
        for n in (3, 6, 11):
            x = torch.randn(n, 16)
            torch.testing.assert_close(g(x), f(x))
    (record,) = pc.history[start:]
    assert not record["replaced"]
    assert any("depends on a dynamic size" in left["why"] for left in record["left"])


def test_a_static_cone_of_a_dynamic_graph_is_searched_outside_the_tracers_fake_mode(options, tmp_path, monkeypatch):
    """A dynamic graph is fused while AOTAutograd's fake mode is on; a cone of static sizes in it is searched and
    tuned there with real tensors all the same (a cache of its own: nothing is found there)."""
    monkeypatch.setattr(options, "cache", tmp_path / "results")
    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8, 16))

        def forward(self, x):
            return x @ torch.relu(self.a @ self.b)     # relu(a @ b): static sizes; x @ ...: dynamic rows

    record = _dynamic_record(Layer(), 16, (3, 7))
    assert not [left for left in record["left"] if "internal error" in left["why"]]
    assert len(record["replaced"]) == 2


DECODE_INTERPRETED = textwrap.dedent("""
    import json, warnings, torch
    warnings.simplefilter("ignore")
    import prism.capture as pc
    from prism.capture import dynamic
    from tests.conftest import example
    pc.OPTIONS.rest, pc.OPTIONS.budget = "eager", 2
    pc.OPTIONS.search = {"time_limit": 900.0, "max_grid": 1}
    layer, (x, k, v) = example("decoder_layer").example(batch=2, length=4)
    f = torch.compile(layer, backend="prism")
    gen = torch.Generator().manual_seed(3)
    worst = 0.0
    with torch.no_grad():
        for step in range(6):                                    # KV lengths 4 ... 9: buckets 4, 8, 16
            worst = max(worst, (f(x, k, v) - layer(x, k, v)).abs().max().item())
            k = torch.cat([k, torch.randn(k.shape[0], 1, k.shape[2], generator=gen) / 4], dim=1)
            v = torch.cat([v, torch.randn(v.shape[0], 1, v.shape[2], generator=gen)], dim=1)
    regions = [{"compiles": sorted(b.compiles.values()), "sizes": len(b._at),
                "shared": [c.shared is not None for c in b._choices.values()],
                "modules": len({id(o.compiled.module) for o in b._at.values()}),
                "execution": sorted({o.execution for o in b._at.values()})} for b in dynamic._BUCKETS.values()]
    print(json.dumps({"worst": worst, "regions": regions}))
""")


def test_under_the_interpreter_a_decode_loop_runs_one_kernel_set_per_bucket(tmp_path):
    """The decode loop through `backend="prism"` with TRITON_INTERPRET=1: the attention region runs generated kernels
    (not torch), right at every KV length, one kernel set per size bucket, taking the length at launch. The child
    shares this session's result cache: the decoder layer's searches (size-free) are there when test_backend.py's
    decoder test ran first, which changes how long the child takes, not what it computes."""
    got = json.loads(interpreted(DECODE_INTERPRETED, tmp_path, cache=os.environ["PRISM_CACHE_DIR"])[-1])
    assert got["worst"] < 1e-5
    (attention,) = got["regions"]                                # the one region whose sizes are symbolic
    assert attention["execution"] == ["interpreter"] and attention["sizes"] == 5    # length 5 ... 9 (4: static)
    assert attention["shared"] == [True] * 2 and attention["compiles"] == [1] * 2 and attention["modules"] == 2


SECOND_PROCESS = textwrap.dedent("""
    import torch
    import prism.capture as pc
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16, bias=False)
    f = torch.compile(lambda x: torch.nn.functional.silu(lin(x)), backend="prism", dynamic=True)
    with torch.no_grad():
        for n in (4, 8):
            x = torch.randn(n, 32)
            torch.testing.assert_close(f(x), torch.nn.functional.silu(lin(x)))
    print([r["replaced"][0]["op"] for r in pc.history])
""")


def test_a_second_process_with_inductors_caches_warm_still_defines_its_regions(tmp_path):
    """Two processes, one Inductor cache: the second must not take the first's compiled code from AOTAutograd's
    cache (keyed before the backend fuses), which calls a Region op only the fusing defines. It crashed so."""
    import subprocess
    import sys

    from tests.child import ROOT, child_env

    for run in ("first", "second"):
        home = tmp_path / run
        home.mkdir()
        env = child_env(home, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PRISM_CACHE_DIR=str(home / "cache"))
        done = subprocess.run([sys.executable, "-W", "ignore", "-c", SECOND_PROCESS], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=900)
        assert done.returncode == 0, f"{run} process: {done.stderr[-3000:]}"
        assert "prism.r" in done.stdout
