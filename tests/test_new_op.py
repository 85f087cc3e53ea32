"""A new op, defined in one place (`tanh()` below) and registered, runs through every pass: the reference
executor, the verifier (e-graph and numeric test), the search, code generation under Triton's interpreter,
and the cost model. Nothing in prism/ names it."""

from __future__ import annotations

import json

import pytest
import torch

import prism
from prism.ir.ops import UNARY, OpDef, register, unregister
from tests.child import interpreted


def tanh() -> OpDef:
    """The new op: its torch meaning, its verification term, its cost, and (for Triton, which has no tanh)
    a decomposition into ops of the table, tanh(x) = 2·sigmoid(2x) − 1."""
    def decompose(f, x):
        return f("add_scalar", f("mul_scalar", f("sigmoid", f("mul_scalar", x, value=2.0)), value=2.0), value=-1.0)
    return OpDef("tanh", UNARY, "hyperbolic tangent", torch.tanh, term="tanh", decompose=decompose, flops=4,
                 zero_preserving=True)


def program() -> prism.KernelGraph:
    """O = tanh(X @ W)"""
    g = prism.KernelGraph()
    x, w = g.input((4, 64), "float32", "X"), g.input((64, 32), "float32", "W")
    g.output(g.tanh(g.matmul(x, w)))
    return g


def fused(inside: bool = False) -> prism.KernelGraph:
    """X @ W accumulated over a loop along K, blocks over W's columns, then tanh: after the loop, or (wrong)
    inside it, on each partial product."""
    g = prism.KernelGraph()
    x, w = g.input((4, 64), "float32", "X"), g.input((64, 32), "float32", "W")
    b = prism.BlockGraph(grid=(2,), loop=4)
    p = b.matmul(b.input(x, imap={}, fmap=1), b.input(w, imap={"x": 1}, fmap=0))
    b.output(b.accum(b.tanh(p)) if inside else b.tanh(b.accum(p)), omap={"x": 1})
    g.output(*g.custom(b, [x, w]))
    return g


def inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(4, 64, generator=gen) / 8, torch.randn(64, 32, generator=gen) / 8]


@pytest.fixture
def new_op():
    register(tanh())
    yield
    unregister("tanh")


def test_the_executor_runs_it(new_op):
    x, w = inputs()
    for g in (program(), fused()):
        (got,) = prism.interp.run(g, [x, w])
        torch.testing.assert_close(got, torch.tanh(x @ w))


def test_the_verifier_proves_the_fused_kernel_and_refuses_the_wrong_one(new_op):
    assert prism.verify.equivalent(program(), fused()).equal
    assert not prism.verify.equivalent(program(), fused(inside=True)).equal
    assert prism.verify.random_test(program(), fused()).equal
    assert not prism.verify.random_test(program(), fused(inside=True)).equal


def test_the_search_finds_fused_kernels_with_it(new_op):
    result = prism.search(program(), workers=1, max_block_ops=5, max_grid=1)
    assert len(result) > 0
    assert all("tanh" in result.describe(i) for i in range(len(result)))
    assert result.stats["cross_check"]["unsound"] == 0


def test_worker_processes_are_not_used_while_it_exists(new_op, monkeypatch):
    """Spawned workers build the op table by import and would not have it: the search's and the tuner's pools
    (prism.pool.start) say so and leave the work in this process; a Ray search refuses."""
    import prism.pool
    from prism.errors import InputError
    from prism.search.cluster import RayWorkers
    from prism.search.parallel import Workers

    monkeypatch.setattr(prism.pool, "_WARNED", set())   # said once per process and reason
    workers = Workers(2)
    with pytest.warns(RuntimeWarning, match="tanh registered at run time"):
        workers.start()
    assert workers.n == 1
    with pytest.raises(InputError, match="tanh were registered at run time"):
        RayWorkers(2)


def test_the_cost_model_counts_its_flops(new_op):
    from prism.tune import estimate, kernels_of

    (work,) = kernels_of(fused())
    assert work.post_vec == 16 * 16 * tanh().flops   # once, after the loop, on the [4, 16] tile padded for tl.dot
    assert work.iter_vec == 0 and estimate(fused()).seconds > 0


CHILD = """
import json, sys, torch
from prism.codegen import compile_graph
from prism.ir.ops import register
from tests.test_new_op import fused, inputs, tanh
register(tanh())
cg = compile_graph(fused())
x, w = inputs()
(got,) = cg(x, w)
print(json.dumps({"err": float((got - torch.tanh(x @ w)).abs().max()), "source": cg.source}))
"""


def test_generated_triton_runs_it_under_the_interpreter(tmp_path):
    out = json.loads(interpreted(CHILD, tmp_path, timeout=300)[-1])
    assert out["err"] < 1e-5
    assert "tl.sigmoid(" in out["source"]   # written from its decomposition: Triton has no tanh
