"""`options={"background": True}`: the compile returns at once, the cones run their programs as torch ops, and
each switches to its chosen kernels when its background superoptimization is done (or says why it failed)."""

from __future__ import annotations

import threading
import types

import pytest
import torch

import prism.capture as pc
import prism.runtime
from prism.capture import background
from tests.capture.test_backend import Ranker

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")]  # see background._finish


@pytest.fixture
def jobs(monkeypatch):
    """No job from another test: each program is superoptimized here."""
    monkeypatch.setattr(background, "_JOBS", {})
    return background._JOBS


def _run(module, x):
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(module, backend="prism", options={"background": True})
        return compiled, compiled(x), module(x)


def test_the_compile_does_not_wait_and_the_kernels_arrive_later(options, jobs, monkeypatch):
    release = threading.Event()
    superoptimize = prism.runtime.superoptimize

    def held(*args, **kwargs):   # the background job waits until the first call has run
        release.wait(600)
        return superoptimize(*args, **kwargs)

    monkeypatch.setattr(prism.runtime, "superoptimize", held)
    torch.manual_seed(0)
    module, x = Ranker(), torch.randn(4, 32)
    compiled, got, want = _run(module, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    (entry,) = pc.history[-1]["replaced"]
    assert entry["chosen"].startswith("pending") and entry["search"] is None
    (job,) = jobs.values()
    assert job.opt is None and entry in job.records

    release.set()
    assert pc.wait(timeout=600)
    assert job.opt is not None and job.failed is None
    assert not entry["chosen"].startswith("pending") and entry["search"]["graphs"] > 0
    with torch.no_grad():
        again = compiled(x)
    assert torch.allclose(again, want, rtol=1e-4, atol=1e-4)


def test_a_failed_background_superoptimization_leaves_the_program_running(options, jobs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no search today")

    monkeypatch.setattr(prism.runtime, "superoptimize", broken)
    torch.manual_seed(1)
    module, x = Ranker(), torch.randn(4, 32)
    compiled, got, want = _run(module, x)
    assert pc.wait(timeout=600)
    with torch.no_grad():
        again = compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4) and torch.allclose(again, want, rtol=1e-4, atol=1e-4)
    (entry,) = pc.history[-1]["replaced"]
    assert entry["chosen"] is None and "no search today" in entry["why"]


def test_on_a_gpu_the_thread_only_searches_and_the_next_call_tunes(jobs, monkeypatch):
    """Tuning times candidates on the device, which must not overlap the model's own launches: the thread
    searches, and the first call after the search superoptimizes in the caller's thread (device faked here)."""
    import prism.runtime.pipeline as pipeline
    import prism.workloads as wl
    from prism.interp import program_fn
    from tests.configs import small_cfg

    threads = {}

    def search(graph, *args):
        threads["search"] = threading.current_thread()

    class Chosen:
        report = types.SimpleNamespace(best=None)

        def __init__(self, graph):
            self.run_op = program_fn(graph)

    def superoptimize(graph, **kwargs):
        threads["tune"] = threading.current_thread()
        return Chosen(graph)

    monkeypatch.setattr(pipeline, "cached_searches", search)
    monkeypatch.setattr(prism.runtime, "superoptimize", superoptimize)
    w = wl.get("swiglu")
    graph = w.build(small_cfg(w))
    job = background.submit(graph, torch.device("cuda"), {"search_options": {}}, lambda opt: {"chosen": "it"})
    assert pc.wait(timeout=600) and threads["search"] is not threading.current_thread() and "tune" not in threads
    xs = [torch.randn(t.shape) for t in graph.inputs]
    assert job.opt is None
    out = job.run_op(xs)
    assert threads["tune"] is threading.current_thread() and isinstance(job.opt, Chosen)
    assert torch.allclose(out[0], program_fn(graph)(xs)[0])
