"""`prism.runtime.superoptimize` on every workload with device="cpu" (which holds on a GPU machine too):
correct outputs through the CPU fallback, a report that names the cost model, and clear errors for bad
inputs. tests/runtime/test_gpu.py runs the generated kernels on a GPU."""

from __future__ import annotations

import textwrap

import pytest
import torch

import prism.workloads as wl
from prism.errors import InputError
from prism.ir import KernelGraph
from prism.options import RunOptions
from prism.runtime import OptimizedGraph, superoptimize
from prism.search import SearchOptions, SearchResult
from prism.tune.safety import overflow_risk
from tests.child import interpreted

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")


def _check_outputs(opt, w, cfg, seed=0):
    xs = w.inputs(cfg, seed=seed)
    (out,) = opt(*xs)
    want = w.reference(*[x.double() for x in xs])
    assert out.dtype == torch.float16 and out.shape == want.shape
    assert torch.allclose(out.double(), want, rtol=2e-2, atol=2e-3), (out.double() - want).abs().max()


@pytest.mark.parametrize("name", wl.names())
def test_each_workload_runs_correctly_through_the_fallback(searched, name, tmp_path):
    w, cfg, result = searched(name)
    opt = superoptimize(w.build(cfg), search_result=result, budget=4, compile=False, cache=tmp_path,
                        device="cpu")
    assert isinstance(opt, OptimizedGraph)
    _check_outputs(opt, w, cfg)
    _check_outputs(opt, w, cfg, seed=1)
    r = opt.report
    assert r.method == "cost-model"
    assert "cost model" in str(r) and "reference executor" in r.execution
    assert opt.execution == "reference" and "runs on reference" in repr(opt)
    assert isinstance(opt.graph, KernelGraph)
    if overflow_risk(w.build(cfg)) is None:        # a safe program gets a safe kernel (the MoE's exp is unguarded)
        assert overflow_risk(opt.graph) is None
    if "online" in w.fused_params:  # attention: the quick search's fused forms have no max: set aside
        assert not opt.graph.blocks and any("set aside" in note for note in r.notes)
    else:
        assert opt.graph.blocks                                                     # a fused kernel was chosen
    assert "@triton.jit" in opt.triton_source
    assert r.search["source"] == "given" and r.search["graphs"] == len(result)


def test_compiled_candidates_and_the_fallback_warning(searched, tmp_path):
    w, cfg, result = searched("swiglu")
    with pytest.warns(RuntimeWarning, match="reference executor"):
        opt = superoptimize(w.build(cfg), search_result=result, budget=2, workers=2, cache=tmp_path,
                            device="cpu")
    assert opt.report.entries and all(e.kernels and e.kernels[0]["registers"] for e in opt.report.entries)
    assert "compiled for sm_90" in opt.report.reason
    _check_outputs(opt, w, cfg)


def test_it_searches_when_no_result_is_given(tmp_path, monkeypatch):
    import prism.runtime.pipeline as so

    calls = []
    real = so._search

    def counting(graph, options, log, progress):
        calls.append(options)
        return real(graph, options, log, progress)

    monkeypatch.setattr(so, "_search", counting)
    w = wl.get("swiglu")
    cfg = {"n": 4, "d": 64}
    opt = superoptimize(w.build(cfg), search_options={"workers": 1, "max_block_ops": 9, "max_grid": 1},
                        budget=2, compile=False, cache=tmp_path, device="cpu")
    assert calls == [SearchOptions(workers=1, max_block_ops=9, max_grid=1)]
    assert opt.report.search["source"] == "searched"
    _check_outputs(opt, w, cfg)


def test_a_saved_result_from_other_sizes_is_reinstantiated(searched, tmp_path):
    w, _, result = searched("rmsnorm")
    path = tmp_path / "rmsnorm.json"
    result.save(path)
    cfg = {"n": 8, "d": 128}
    opt = superoptimize(w.build(cfg), search_result=str(path), budget=2, compile=False, cache=False,
                        device="cpu")
    _check_outputs(opt, w, cfg)


def test_a_stale_search_result_is_used_and_reported(searched):
    """A result searched by other code is still verified, so it is tuned; the report says graphs may be
    missing."""
    w, cfg, result = searched("swiglu")
    old = SearchResult.from_json(result.to_json() | {"build": "0.0.1+000000000000"})
    opt = superoptimize(w.build(cfg), search_result=old, budget=2, compile=False, cache=False, device="cpu")
    assert any("made by Prism 0.0.1+000000000000" in n for n in opt.report.notes)
    fresh = superoptimize(w.build(cfg), search_result=result, budget=2, compile=False, cache=False, device="cpu")
    assert not any("made by Prism" in n for n in fresh.report.notes)


def test_a_result_for_another_program_is_refused(searched):
    w, _, result = searched("swiglu")
    other = wl.get("rmsnorm").build({"n": 4, "d": 64})
    with pytest.raises(InputError, match="different program"):
        superoptimize(other, search_result=result, cache=False, compile=False)


def test_bad_arguments_are_input_errors(searched):
    w, cfg, result = searched("swiglu")
    with pytest.raises(InputError, match="KernelGraph"):
        superoptimize("not a graph")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no GPU"):
            superoptimize(w.build(cfg), search_result=result, device="cuda", cache=False)
    with pytest.raises(InputError, match="device"):
        superoptimize(w.build(cfg), search_result=result, device="mps", cache=False)
    with pytest.raises(InputError, match="cache"):
        superoptimize(w.build(cfg), search_result=result, cache=3.5)
    with pytest.raises(InputError, match="no option 'devcie'; the run's are device, cache"):
        superoptimize(w.build(cfg), search_result=result, devcie="cpu")
    with pytest.raises(InputError, match="workers must be a positive"):
        superoptimize(w.build(cfg), RunOptions(workers=0), search_result=result)


def test_pdl_launches_every_kernel_of_the_result_with_it(searched):
    """RunOptions.pdl: the chosen graph's kernels are generated for programmatic dependent launch (prism.ir.Launch
    .pdl), the kernels of kernel-level ops included; the choice is the one without it."""
    from prism.codegen import compile_graph

    w, cfg, result = searched("attention")
    plain, pdl = (superoptimize(w.build(cfg), search_result=result, budget=2, compile=False, cache=False,
                                device="cpu", pdl=on) for on in (False, True))
    assert pdl.pdl and pdl.graph.structural_hash() == plain.graph.structural_hash()
    assert all("launch_pdl=True" in k.source for k in pdl.compiled.kernels) and "PDL" not in plain.triton_source
    unfused = compile_graph(w.build(cfg), pdl=True)       # one kernel per op
    assert len(unfused.kernels) > 1 and all(k.constexprs["PDL"] == 1 for k in unfused.kernels)
    _check_outputs(pdl, w, cfg)
    with pytest.raises(InputError, match="pdl must be True or False"):
        superoptimize(w.build(cfg), search_result=result, pdl="yes", cache=False)


def test_run_options_as_an_object_a_dict_or_keywords_are_one_call(searched):
    """`superoptimize(g, RunOptions(...))`, a dict of its fields, and the same fields as keywords choose alike;
    keywords that are not run options change the tuning's options."""
    w, cfg, result = searched("swiglu")
    calls = [superoptimize(w.build(cfg), RunOptions(device="cpu", cache=False), search_result=result, budget=2),
             superoptimize(w.build(cfg), {"device": "cpu", "cache": False}, search_result=result, budget=2),
             superoptimize(w.build(cfg), search_result=result, device="cpu", cache=False, budget=2)]
    assert len({str(opt.report.best.candidate) for opt in calls}) == 1


def test_wrong_tensors_are_input_errors(searched):
    w, cfg, result = searched("swiglu")
    opt = superoptimize(w.build(cfg), search_result=result, budget=2, compile=False, cache=False, device="cpu")
    xs = w.inputs(cfg, seed=0)
    with pytest.raises(InputError, match="takes 3 tensor"):
        opt(*xs[:2])
    with pytest.raises(InputError, match="shape"):
        opt(xs[0][:2], *xs[1:])
    with pytest.raises(InputError, match="dtype"):
        opt(xs[0].float(), *xs[1:])
    with pytest.raises(InputError, match="torch.Tensor"):
        opt(xs[0].tolist(), *xs[1:])
    with pytest.raises(InputError, match="on meta"):
        opt(xs[0].to("meta"), *xs[1:])


INTERPRETED = textwrap.dedent("""
    import sys, torch, prism.workloads as wl
    from prism.search import search
    from prism.runtime import superoptimize
    from tests.configs import limits
    for name in sys.argv[1:]:
        w = wl.get(name); cfg = w.small_config
        result = search(w.build(cfg), workers=1, **limits(name))
        opt = superoptimize(w.build(cfg), search_result=result, budget=2, compile=False, cache=False, device="cpu")
        xs = w.inputs(cfg, seed=0)
        (out,) = opt(*xs)
        want = w.reference(*[x.double() for x in xs])
        ok = bool(torch.allclose(out.double(), want, rtol=2e-2, atol=2e-3))
        print(name, opt.execution, ok, "fused" if opt.graph.blocks else "unfused")
    print(opt.report.execution)
""")
INTERPRETED_NAMES = ["swiglu"] + [n for n in wl.names() if n not in wl.paper_names()]
"""SwiGLU, and every program added beyond the paper's five: its chosen kernel, run by Triton's interpreter."""


def test_under_triton_interpret_the_generated_kernels_run_in_the_interpreter(tmp_path):
    *rows, last = interpreted(INTERPRETED, tmp_path, *INTERPRETED_NAMES, timeout=600)[-len(INTERPRETED_NAMES) - 1:]
    assert [r.split()[:3] for r in rows] == [[n, "interpreter", "True"] for n in INTERPRETED_NAMES], rows
    fused = {r.split()[0] for r in rows if r.endswith(" fused")}
    assert fused >= {"swiglu", "lora", "rmsnorm_linear", "ntrans", "moe"}   # GQA's quick search has no safe fused form
    assert "Triton's interpreter" in last


def test_with_no_fused_candidate_the_unfused_program_runs(searched):
    from prism.search import SearchResult

    w, cfg, result = searched("swiglu")
    empty = SearchResult(result.program, [], {})
    opt = superoptimize(w.build(cfg), search_result=empty, budget=2, compile=False, cache=False, device="cpu")
    assert not opt.graph.blocks and opt.report.best.label == "unfused program"
    assert any("only the unfused program" in n for n in opt.report.notes)
    _check_outputs(opt, w, cfg)


def _rows_plus(n: int) -> KernelGraph:
    """X [n, 32] @ W [32, 16] + R [n, 16]: a projection and its residual over n rows."""
    g = KernelGraph()
    x, w, r = g.input((n, 32), "float16", "X"), g.input((32, 16), "float16", "W"), g.input((n, 16), "float16", "R")
    g.output(g.add(g.matmul(x, w), r))
    return g


def test_a_search_where_a_dim_is_1_serves_only_where_it_is_1(tmp_path):
    """The search takes a dim of extent 1 as absent (prism.symbolic.dims.AtomSpace), so a decode step's search (one
    row) holds where there is one row, and a prefill's (many rows) where there are any: the result cache serves
    the first only to programs with that dim 1, the second to both. A decode search served to a prefill left the
    prefill's projections unfused."""
    from prism.runtime.pipeline import cached_search

    def source(n, cache):
        return cached_search(_rows_plus(n), {"workers": 1}, cache=cache).stats.get("source", "searched")

    assert [source(n, tmp_path / "decode first") for n in (1, 4, 1)] == ["searched", "searched", "search cache"]
    assert [source(n, tmp_path / "prefill first") for n in (4, 1)] == ["searched", "search cache"]
    one = cached_search(_rows_plus(1), {"workers": 1}, cache=tmp_path / "decode first")
    with pytest.raises(InputError, match="made where a dim has extent 1"):
        superoptimize(_rows_plus(4), search_result=one, cache=False, device="cpu")


def test_a_program_with_dims_of_1_looks_for_searches_where_fewer_are_1_closest_first():
    """A decode step at batch 1 (batch and row dims 1) takes its prefill's search (batch 1 only) before one where
    no dim is 1; past 8 dims of 1, only its own pattern and the one with none are looked for."""
    from prism.runtime.pipeline import _wider

    assert _wider("1n1n,nn") == ["1n1n,nn", "1nnn,nn", "nn1n,nn", "nnnn,nn"]
    assert _wider("nn,n") == ["nn,n"]
    assert _wider("1" * 9) == ["1" * 9, "n" * 9]
