"""Streamed contractions (prism.codegen.stream): which matmuls are summed over K in chunks, what the cost model
holds of them, and MoE's fused form compiled for sm_90 with them. The kernels' numbers are checked under the
interpreter (tests/codegen/cases.py STREAMED, and the mutants in ragged_cases.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import prism
from prism import codegen
from prism.codegen import emit
from prism.codegen.stream import CHUNK, streamed
from prism.codegen.layout import Padded
from prism.ir import KernelGraph
from prism.search.result import SearchResult
from prism.tune import cost
from prism.tune.compile import compile_one
from prism.tune.space import Candidate, instantiate
from tests.codegen.cases import GEMV, STREAMED

MOE = {"e": 8, "n": 16, "d": 2048, "f": 1408}
"""DeepSeek-MoE-16B's expert shape, the paper table's MoE config."""
SEARCH = Path(__file__).resolve().parents[2] / "benchmarks/results/searches_h200_2026-11-27_cd/moe.json"
FORM = "#24 grid(x=8, y=8, z=2) loop=11 warps=8 stages=2"
"""The H200 search's MoE form the tuner ranks first: X [16, 2048] loop-invariant and W1 [2048, 16] in every
iteration, contracted whole, then exp and a [16, 1024] accumulator (output d split over z, f summed over y)."""


def _form() -> KernelGraph:
    result = SearchResult.from_json(json.loads(SEARCH.read_text()))
    shapes = [t.shape for t in prism.workloads.get("moe").build(MOE, "float16").inputs]
    return instantiate(result.graphs[Candidate.parse(FORM).graph], shapes, "float16", result.names,
                       Candidate.parse(FORM))


def _blocks(g: KernelGraph) -> list:
    return [n.attrs["block"] for _, n in g.topo() if n.op == "custom"]


def _streams(g: KernelGraph) -> list[dict[int, int]]:
    return [streamed(b, Padded(b).shape) for b in _blocks(g)]


@pytest.mark.parametrize("case", list(STREAMED))
def test_each_streamed_case_sums_its_matmul_in_chunks(case):
    assert codegen.compile_graph(STREAMED[case]().graph).source.count("K in chunks (prism.codegen.stream)") == 1


def test_which_matmuls_are_streamed():
    """MoE's X @ W1 (two loaders read by it alone, K = d whole and long) is; attention's Q @ K^T (K = 128), SwiGLU's
    (X is read by two matmuls), a GEMV launch's, and a K the loop walks are not."""
    moe = _streams(prism.workloads.get("moe").fused(MOE))
    assert [list(s.values()) for s in moe] == [[CHUNK]]
    (block,) = _blocks(prism.workloads.get("moe").fused(MOE))
    (i,) = moe[0]
    assert [block.nodes[r[0]].attrs["index"] for r in block.nodes[i].inputs] == [0, 1]   # X and W1
    assert not any(_streams(prism.workloads.get("attention").fused({"b": 2, "g": 8, "h": 2048, "d": 128})))
    assert not any(_streams(prism.workloads.get("swiglu").fused({"n": 8, "d": 4096})))
    assert not any(_streams(GEMV["gemv_m8_n5632_k2048_f16"]().graph))
    assert not any(_streams(GEMV["split_dot_m8_n5632_k5632_f32"]().graph))   # K over the loop and grid dim y


def test_the_cost_model_holds_one_chunk_of_each_streamed_operand(monkeypatch):
    """Registers and staged shared memory count a chunk of X and of W1, not the whole tiles, and X, read again from
    L2 in every iteration, costs L2 bytes there."""
    g = _form()
    (streamed_work,) = [k for k in cost.kernels_of(g) if k.fused]
    monkeypatch.setattr(cost, "streamed", lambda block, shape: {})
    (whole,) = [k for k in cost.kernels_of(g) if k.fused]
    held = (16 * 2048 + 2048 * 16 - 16 * CHUNK - CHUNK * 16) * 2 / 4   # 32-bit values of the two float16 tiles
    largest = 16 * 2048 - 16 * 1024   # the largest tile at once: X's, then the accumulator [16, 1024]
    assert whole.live - streamed_work.live == pytest.approx(held + largest)
    assert streamed_work.smem < whole.smem
    assert streamed_work.iter_l2 - whole.iter_l2 == pytest.approx(16 * 2048 * 2)


def test_moes_ranked_first_form_compiles_for_sm90_without_a_stack_frame(monkeypatch):
    """With its contraction streamed the form holds no X or W1 tile whole: no stack frame and half the shared memory
    of the same kernel with the contraction as one dot (compiled as a launch on contiguous inputs specializes it)."""
    g = _form()
    (kernel,) = codegen.compile_graph(g).aot(strides=[tuple(torch.empty(t.shape, device="meta").stride()) for t in g.inputs])
    assert kernel.frame == 0, str(kernel)
    monkeypatch.setattr(emit, "streamed", lambda block, shape: {})
    (whole,) = codegen.compile_graph(g).aot(strides=[tuple(torch.empty(t.shape, device="meta").stride()) for t in g.inputs])
    assert kernel.shared < whole.shared, (str(kernel), str(whole))


def test_the_tuner_compiles_ahead_of_time_as_a_launch_on_contiguous_inputs():
    """Without strides given, a candidate is compiled as the tuner's inputs (contiguous) specialize its launch, not
    with every stride unknown (no load then known contiguous: MoE's form showed a 2.9 KB stack frame that way)."""
    g = _form()
    (kernel,) = compile_one(g.to_json()).kernels
    (launched,) = codegen.compile_graph(g).aot(strides=[tuple(torch.empty(t.shape, device="meta").stride())
                                                        for t in g.inputs])
    assert (kernel.registers, kernel.frame, kernel.shared) == (launched.registers, launched.frame, launched.shared)
