"""Decode projections as GEMVs (prism.ir.Launch.gemv) and split-K in one launch (prism.codegen.split): what the
compiler makes of them for sm_90, and what the tuner's space offers a Llama step. Their numbers are checked under
Triton's interpreter with the other cases (tests/codegen/cases.py GEMV, ragged_cases.py's split mutants)."""

from __future__ import annotations

import math
import re

import pytest

from prism import codegen
from prism.codegen.aot import compile_aot
from prism.tune.space import GEMV_ROWS, Space
from tests.codegen.cases import projection

LINEAR = {"stride_x0": 2048, "stride_x1": 1, "stride_w0": 1, "stride_w1": 2048, "stride_out0_0": 5632,
          "stride_out0_1": 1}
"""X [m, 2048] and a Linear's weight read as W [2048, 5632] (stored [5632, 2048]: K contiguous), as a launch
passes their strides."""


def _ptx(m: int, gemv: bool, strides: dict[str, int] = LINEAR) -> str:
    cg = codegen.compile_graph(projection(m, 2048, 5632, 16, 128, gemv=gemv)().graph)
    (spec,) = cg.kernels
    return compile_aot(getattr(cg.module, spec.name), spec, strides=strides).ptx


def _weight_loads(ptx: str) -> list[str]:
    return re.findall(r"ld\.global\.L1::evict_first\S*", ptx)


@pytest.mark.parametrize("m", [1, 8])
def test_a_gemv_streams_the_weight_in_16_byte_loads_with_no_mma(m):
    """The weight's tile [128, 16] read along its contiguous K: 128-bit loads (v4.b32), evicted first; the
    product a multiply and a sum, no tensor-core instruction. The same kernel as Triton's dot pads M to 16 and
    issues mma."""
    ptx = _ptx(m, gemv=True)
    loads = _weight_loads(ptx)
    assert loads and all(load.endswith(".v4.b32") for load in loads), loads
    assert "mma" not in ptx
    assert "mma" in _ptx(m, gemv=False)


def test_the_16_byte_loads_come_from_knowing_the_weights_layout():
    """Compiled without the launch's strides (every stride a plain i32), no load of the weight's tile is known to
    be contiguous: Triton loads it element by element. What makes the loads wide is the specialization a launch
    gets, which compile_aot mirrors."""
    assert not any(".v4" in load for load in _weight_loads(_ptx(1, gemv=True, strides={})))


LLAMA = {"qkv": (2048, 3072), "o_proj": (2048, 2048), "gate_up": (2048, 5632), "down": (5632, 2048),
         "lm_head": (2048, 32000)}
"""The Llama-2048 decode step's projections (input features, output features)."""


@pytest.mark.parametrize("name", LLAMA)
def test_each_projection_of_a_llama_step_is_offered_four_blocks_per_sm_as_a_gemv(searched, name):
    """At batch 1 the space of RMSNorm-linear (a norm and a projection) at the step's shapes, 32000 and 5632 included
    (ragged column tiles), offers GEMV launches of tilings with at least 4 blocks on each of 132 SMs."""
    w, _, result = searched("rmsnorm_linear")
    d, o = LLAMA[name]
    space = Space(result, w.build({"n": 1, "d": d, "o": o}))
    many = [(gs, grid, loop) for gs, grid, loop in space.tilings() if math.prod(grid) >= 4 * 132]
    assert many and any(gemv for gs, grid, loop in many for *_, gemv in gs.launches(grid, loop))


def _rows(space: Space, c) -> int:
    """The most rows (M) of any matmul tile in candidate c's kernels."""
    graph = space.instantiate(c)
    return max(b.nodes[n.inputs[0][0]].outputs[0].shape[-2] for node in graph.nodes if node.op == "custom"
               for b in [node.attrs["block"]] for n in b.nodes if n.op == "matmul")


def test_gemv_launches_are_offered_for_few_rows_only(searched):
    """A tiling whose matmuls have at most GEMV_ROWS rows a block is offered both ways; one with more, Triton's dot
    only: at 64 rows, the tilings that split them over a grid dim into tiles of 16 or fewer."""
    w, _, result = searched("rmsnorm_linear")
    for n in (1, 4 * GEMV_ROWS):
        space = Space(result, w.build({"n": n, "d": 1024, "o": 1024}))
        points = space.sample(600)
        assert any(c.gemv for c in points) and any(not c.gemv for c in points)
        assert all(_rows(space, c) <= GEMV_ROWS for c in points if c.gemv)
        if n > GEMV_ROWS:
            assert any(_rows(space, c) > GEMV_ROWS for c in points)


def test_a_gemv_candidate_prints_parses_and_instantiates_as_one():
    from prism.tune.space import Candidate

    c = Candidate(3, (64, 2), 4, 4, 2, gemv=True)
    assert str(c) == "#3 grid(x=64, y=2) loop=4 warps=4 stages=2 gemv"
    assert Candidate.parse(str(c)) == c and Candidate.from_json(c.to_json()) == c
    assert c.launch.gemv and str(c.launch) == "num_warps=4 num_stages=2 gemv"


def test_a_gemv_launch_round_trips_through_json():
    from prism.ir import KernelGraph

    g = projection(3, 256, 96, 32, 64, splits=2)().graph
    again = KernelGraph.from_json(g.to_json())
    blocks = [n.attrs["block"] for n in again.nodes if n.op == "custom"]
    assert [b.launch.gemv for b in blocks] == [True]
