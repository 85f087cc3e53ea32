"""Issue 4's acceptance: each workload's hand-written fused µGraph is among the search's results."""

import pytest

import prism.workloads as wl
from prism.search import search
from prism.search.canonical import signature
from tests.configs import limits, small_cfg


@pytest.fixture(scope="module", params=wl.names())
def searched(request):
    w = wl.get(request.param)
    cfg = small_cfg(w)
    return w, cfg, search(w.build(cfg), workers=1, **limits(w.name, fused=True))


def test_the_hand_written_fused_graph_is_found(searched):
    """Compared modulo op order, grid-dim names and sizes; attention's hand-written second kernel
    (load, accumulate once, divide) is read as the kernel-level div it computes."""
    w, cfg, result = searched
    want = signature(w.fused(cfg), elementwise_kernels=True)
    found = [signature(result.instantiate(i)) for i in range(len(result))]
    assert want in found, "\n".join([want, "--- found:"] + found)


def test_every_returned_graph_passed_the_cross_check(searched):
    _, _, result = searched
    s = result.stats
    assert len(result) > 0
    assert s["cross_check"]["checked"] == s["verify"]["verified"] == len(result)
    assert s["cross_check"]["unsound"] == 0 and s["cross_check"]["events"] == []
    assert not s["timed_out"]


def test_results_are_unique_and_canonically_sorted(searched):
    _, _, result = searched
    keys = [g.key() for g in result.graphs]
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys)
