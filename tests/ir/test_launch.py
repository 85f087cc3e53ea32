"""A block graph's launch (warps, stages): how its kernel is compiled, never what it computes."""

from __future__ import annotations

import pytest

import prism.workloads as wl
from prism.codegen import plan_graph
from prism.errors import MappingError, SerializationError
from prism.ir import KernelGraph, Launch, from_json


def _tuned(launch: Launch) -> KernelGraph:
    w = wl.get("rmsnorm")
    g = w.fused({"n": 4, "d": 64})
    for b in g.blocks:
        b.launch = launch            # allowed on a frozen block graph: not structure
    return g


def test_the_launch_travels_with_the_graph_and_counts_in_its_hash():
    plain, tuned = _tuned(Launch()), _tuned(Launch(2, 4))
    assert "num_warps=2 num_stages=4" in str(tuned) and "num_warps" not in str(plain)
    doc = tuned.to_json()
    back = from_json(doc)
    assert back.blocks[0].launch == Launch(2, 4) and back.structural_hash() == tuned.structural_hash()
    assert "launch" not in plain.to_json()["nodes"][2]["attrs"]["block"]      # the default is not written
    assert tuned.structural_hash() != plain.structural_hash()
    assert tuned.structural_hash(shapes=False) == plain.structural_hash(shapes=False)


def test_code_generation_uses_the_launch():
    plan = plan_graph(_tuned(Launch(2, 4)))
    assert [(k.num_warps, k.num_stages) for k in plan.kernels] == [(2, 4)]
    assert "num_warps=2, num_stages=4" in plan.source
    default = plan_graph(_tuned(Launch()))
    assert default.kernels[0].num_stages is None and "num_stages" not in default.source
    assert plan_graph(_tuned(Launch(2, 4)), num_warps=8).kernels[0].num_warps == 8   # the caller's override wins


def test_programmatic_dependent_launch_travels_with_the_graph():
    """Launch.pdl: in JSON and the hash (not the size-free one), and the kernel's launcher asks for it."""
    pdl, plain = _tuned(Launch(pdl=True)), _tuned(Launch())
    back = from_json(pdl.to_json())
    assert back.blocks[0].launch == Launch(pdl=True) and back.structural_hash() == pdl.structural_hash() \
        != plain.structural_hash()
    assert pdl.structural_hash(shapes=False) == plain.structural_hash(shapes=False)
    assert "launch_pdl=True" in plan_graph(pdl).source and "launch_pdl" not in plan_graph(plain).source


@pytest.mark.parametrize("kwargs, message", [
    ({"pdl": 1}, "True or False"),
    ({"num_warps": 3}, "power of two"), ({"num_warps": 64}, "power of two"), ({"num_warps": True}, "power of two"),
    ({"num_stages": 0}, "from 1 to"), ({"num_stages": 9}, "from 1 to"), ({"num_stages": 2.0}, "from 1 to"),
])
def test_a_bad_launch_is_a_clear_error(kwargs, message):
    with pytest.raises(MappingError, match=message):
        Launch(**kwargs)


@pytest.mark.parametrize("launch, message", [
    ({"num_warps": 3}, "power of two"), ({"warps": 4}, "unexpected field"), ([4], "must be an object"),
])
def test_a_corrupt_launch_in_a_document_is_refused(launch, message):
    doc = _tuned(Launch()).to_json()
    doc["nodes"][2]["attrs"]["block"]["launch"] = launch
    with pytest.raises(SerializationError, match=message):
        from_json(doc)
