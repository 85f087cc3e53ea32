"""What goes ahead of the replacements (prism.capture.ahead): on a GPU only single-output searches, into a result
cache, and the replacement then tunes from the cached search. (The CPU's whole superoptimization ahead is
tested through the backend, in test_backend.py.)"""

from __future__ import annotations

import pytest
import torch

from prism.capture.ahead import Ahead
from prism.ir import KernelGraph
from prism.runtime.pipeline import cached_search

SEARCH = {"max_grid": 1, "time_limit": 900.0}


def _silu_mm() -> KernelGraph:
    g = KernelGraph()
    x, w = g.input((4, 32), "float32", "x"), g.input((32, 16), "float32", "w")
    g.output(g.silu(g.matmul(x, w)))
    return g


def test_on_a_gpu_the_search_goes_ahead_into_the_result_cache(tmp_path):
    graph = _silu_mm()
    with Ahead(torch.device("cuda"), {"cache": str(tmp_path), "search_options": SEARCH}) as ahead:
        ahead.submit(graph)
        ahead.submit(graph)                      # the same program: started once
        (started,) = ahead.futures.values()
        assert started.result() is None
    found = cached_search(graph, SEARCH, str(tmp_path))
    assert found.stats["source"] == "search cache" and found.graphs


def _norm_qk() -> KernelGraph:
    """A norm and two projections of it: two outputs whose parts share forms (a joint group)."""
    g = KernelGraph()
    x = g.input((4, 32), "float32", "x")
    wq, wk = g.input((32, 16), "float32", "wq"), g.input((32, 16), "float32", "wk")
    n = g.div(x, g.sqrt(g.add_scalar(g.mul_scalar(g.sum(g.square(x), dim=1), value=1 / 32), value=1e-6)))
    g.output(g.matmul(n, wq), g.matmul(n, wk))
    return g


def test_on_a_gpu_a_program_with_several_outputs_is_searched_ahead_as_superoptimize_searches_it(tmp_path,
                                                                                              monkeypatch):
    """Each output's cone and the group's joint forms go into the result cache; afterwards every search
    superoptimize makes for the program is a cache hit (searching or joining again raises here)."""
    import importlib

    import prism.runtime.pipeline as pipeline

    graph = _norm_qk()
    with Ahead(torch.device("cuda"), {"cache": str(tmp_path), "search_options": SEARCH}) as ahead:
        ahead.submit(graph)
        (started,) = ahead.futures.values()
        assert started.result() is None

    def searched_again(*args, **kwargs):
        raise AssertionError("searched again: not from the result cache")

    monkeypatch.setattr(pipeline, "_search", searched_again)
    monkeypatch.setattr(importlib.import_module("prism.search"), "join", searched_again)   # (prism.search is also
    # the function's name on the package)
    def superoptimized(cache):   # on the CPU: the same searches, then the cost model's tuning
        return pipeline.chosen(graph, device="cpu", cache=str(cache), search_options=SEARCH, compile=False)

    superoptimized(tmp_path)
    with pytest.raises(AssertionError, match="searched again"):   # the check itself: an empty cache searches
        superoptimized(tmp_path / "empty")


def test_on_a_gpu_nothing_goes_ahead_without_a_cache(tmp_path):
    with Ahead(torch.device("cuda"), {"cache": False, "search_options": SEARCH}) as ahead:
        ahead.submit(_silu_mm())
        ahead.submit(_norm_qk())
        assert not ahead.futures
