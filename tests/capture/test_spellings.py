"""Ops that reach the backend decomposed: with symbolic sizes the graph is traced with Inductor's decomposition
table when Inductor runs the rest, and silu and the exact gelu arrive as several ATen ops. Lowering takes each
spelling whole, as the Prism op (`prism.capture.lower.SPELLINGS`), where nothing else reads its inner values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import prism.workloads as wl
from prism.capture.lower import lower
from prism.interp import run
from prism.verify import equivalent

from tests.conftest import small_cfg


def _decomposed(fn, *inputs):
    """`fn` traced to ATen with Inductor's decompositions, as a graph with symbolic sizes reaches the backend."""
    from torch._inductor.decomposition import select_decomp_table

    return make_fx(fn, decomposition_table=select_decomp_table(), tracing_mode="fake")(*inputs)


class Lowered:
    """`gm` lowered whole, callable on `gm`'s inputs through the reference executor."""

    def __init__(self, gm):
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        (out,) = gm.graph.find_nodes(op="output")
        outputs = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
        self.graph, self.sources, _ = lower(nodes, self.placeholders, outputs)
        self.ops = [node.op for _, node in self.graph.topo()]

    def __call__(self, *inputs):
        value = dict(zip(self.placeholders, inputs))
        return run(self.graph, [s.apply(value[s.node]).float() for s in self.sources])


def _aten(gm):
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("act, spelled_by", [(F.silu, "aten.div.Tensor"), (F.gelu, "aten.erf.default")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_decomposed_activation_is_lowered_as_the_prism_op(act, spelled_by, dtype):
    inputs = [torch.randn(shape, generator=torch.Generator().manual_seed(k)).to(dtype)
              for k, shape in enumerate([(4, 8), (8, 16), (8, 16)])]

    def fn(x, wg, wu):
        return act(x @ wg) * (x @ wu)
    gm = _decomposed(fn, *inputs)
    assert spelled_by in _aten(gm) and f"aten.{act.__name__}.default" not in _aten(gm)  # it is decomposed here
    lowered = Lowered(gm)
    assert act.__name__ in lowered.ops and not {"exp", "neg", "div"} & set(lowered.ops), lowered.ops
    want = fn(*(t.float() for t in inputs))
    torch.testing.assert_close(lowered(*inputs)[0], want, rtol=1e-5, atol=1e-5)


def test_the_decomposed_swiglu_is_proven_equal_to_the_workload():
    w = wl.get("swiglu")
    cfg = small_cfg("swiglu")
    gm = _decomposed(lambda x, wg, wu: F.silu(x @ wg) * (x @ wu), *w.inputs(cfg, seed=0))
    verdict = equivalent(w.build(cfg), Lowered(gm).graph)
    assert verdict.equal, verdict.reason


def test_the_exact_gelu_as_python_writes_it_is_gelu():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))

    def fn(x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    lowered = Lowered(make_fx(fn)(x))
    assert lowered.ops == ["input", "gelu"], lowered.ops
    torch.testing.assert_close(lowered(x)[0], F.gelu(x))


def test_a_spelling_whose_inner_value_is_read_elsewhere_is_lowered_op_by_op():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))

    def fn(x):
        e = torch.exp(-x)
        return x / (1 + e), e * 2   # exp(-x) is also an output: silu would not give it
    lowered = Lowered(make_fx(fn)(x))
    assert "silu" not in lowered.ops and "exp" in lowered.ops
    for got, want in zip(lowered(x), fn(x)):
        torch.testing.assert_close(got, want)


def test_a_spelling_with_another_operand_is_not_the_op():
    x, y = (torch.randn(4, 8, generator=torch.Generator().manual_seed(k)) for k in range(2))

    def fn(x, y):
        return x / (1 + torch.exp(-y))   # x · sigmoid(y), not silu
    lowered = Lowered(make_fx(fn)(x, y))
    assert "silu" not in lowered.ops
    torch.testing.assert_close(lowered(x, y)[0], fn(x, y))


def test_erf_outside_gelus_spelling_is_erf():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    lowered = Lowered(make_fx(lambda x: torch.erf(x) * 2)(x))
    assert "erf" in lowered.ops and "gelu" not in lowered.ops
    torch.testing.assert_close(lowered(x)[0], torch.erf(x) * 2)
