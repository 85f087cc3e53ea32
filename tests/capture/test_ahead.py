"""What goes ahead of the replacements (prism.capture.ahead): on a GPU only single-output searches, into a result
cache, and the replacement then tunes from the cached search. (The CPU's whole superoptimization ahead is
tested through the backend, in test_backend.py.)"""

from __future__ import annotations

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


def test_on_a_gpu_nothing_goes_ahead_without_a_cache_or_for_several_outputs(tmp_path):
    several = KernelGraph()
    x, w = several.input((4, 32), "float32", "x"), several.input((32, 16), "float32", "w")
    y = several.matmul(x, w)
    several.output(several.silu(y), y)
    with Ahead(torch.device("cuda"), {"cache": False, "search_options": SEARCH}) as ahead:
        ahead.submit(_silu_mm())
        assert not ahead.futures
    with Ahead(torch.device("cuda"), {"cache": str(tmp_path), "search_options": SEARCH}) as ahead:
        ahead.submit(several)
        assert not ahead.futures
