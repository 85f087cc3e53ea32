"""A new accumulator kind, defined in one place (`product()` below, one record) and registered with its axioms, runs
through every pass: the reference executor, the verifier (e-graph and numeric test), code generation under
Triton's interpreter, and the cost model. Nothing in prism/ names it.

The kind is a running product over the loop: exp of a row sum, computed tile by tile, is the product of the
tiles' exps (exp(a + b) = exp(a)·exp(b)), so `exp(sum(X, 1))` fuses as accum_prod(exp(sum(tile, 1))). Its record
says how each pass treats it: its combine op (the executor's and the generated code's update, from the op table),
its identity (the value before the first iteration, and the padding of a ragged tile) and its reducer, the term
verification writes it as; the term language, the numeric model and the e-graph's declarations follow from the
record. Its axiom says why the fused form is right. The search does not try it: the generator offers an
accumulator where the op it accumulates names it (OpDef.accumulator: a max is accumulated by max), and no op of
the table names this one.
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest
import torch

import prism
from prism.ir.kinds import Accumulator, register, unregister
from prism.verify import axioms
from prism.verify.axioms import Rule
from prism.verify.expr import Sym, Var, exp, make, red
from tests.child import interpreted


def product() -> Accumulator:
    """The new kind: the product of a loop tile over all iterations, from 1; verification writes it as `redprod`
    over the loop's parallel dim (its members multiplied)."""
    return Accumulator("accum_prod", combine="mul", identity=1.0, reducer="redprod")


def product_axioms() -> Iterator[Rule]:
    """Its axiom: a product of exponentials is the exponential of the sum, e^a·e^b·... = e^(a + b + ...)."""
    t, p = Var("?t"), Sym("p", "pdim")
    yield Rule("redprod-exp", make("redprod", exp(t), attrs=(p,)), exp(red(t, p)))


def program() -> prism.KernelGraph:
    """O = exp(sum(X, 1))"""
    g = prism.KernelGraph()
    x = g.input((4, 64), "float32", "X")
    g.output(g.exp(g.sum(x, 1)))
    return g


def fused(kind: str = "accum_prod") -> prism.KernelGraph:
    """Blocks over X's rows, a loop along its columns: each tile's row sums, exp, multiplied over the loop; or
    (wrong) with another accumulator `kind`."""
    g = prism.KernelGraph()
    x = g.input((4, 64), "float32", "X")
    b = prism.BlockGraph(grid=(2,), loop=4)
    tile = b.input(x, imap={"x": 0}, fmap=1)
    b.output(b.accum(b.exp(b.sum(tile, 1)), kind), omap={"x": 0})
    g.output(*g.custom(b, [x]))
    return g


def inputs() -> list[torch.Tensor]:
    return [torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) / 8]


@pytest.fixture
def new_kind():
    register(product())
    axioms.register(product_axioms)
    yield
    axioms.unregister(product_axioms)
    unregister("accum_prod")


def test_the_executor_runs_it(new_kind):
    (x,) = inputs()
    for g in (program(), fused()):
        (got,) = prism.interp.run(g, [x])
        torch.testing.assert_close(got, torch.exp(x.sum(1, keepdim=True)))


def test_the_verifier_proves_the_fused_kernel_and_refuses_the_wrong_one(new_kind):
    assert prism.verify.equivalent(program(), fused()).equal
    assert not prism.verify.equivalent(program(), fused("accum")).equal
    assert prism.verify.random_test(program(), fused()).equal
    assert not prism.verify.random_test(program(), fused("accum")).equal


def test_without_its_axiom_nothing_is_proved(new_kind):
    axioms.unregister(product_axioms)
    try:
        assert not prism.verify.equivalent(program(), fused()).equal
    finally:
        axioms.register(product_axioms)


def test_worker_processes_are_not_used_while_it_exists(new_kind, monkeypatch):
    """Spawned workers build the node kinds by import and would not have it (prism.pool, as for a new op)."""
    import prism.pool
    from prism.search.parallel import Workers

    monkeypatch.setattr(prism.pool, "_WARNED", set())
    workers = Workers(2)
    with pytest.warns(RuntimeWarning, match="accum_prod registered at run time"):
        workers.start()
    assert workers.n == 1


def test_the_cost_model_holds_it_across_the_loop(new_kind):
    from prism.tune import estimate, kernels_of

    (work,) = kernels_of(fused())
    assert work.iter_vec > 0 and estimate(fused()).seconds > 0


CHILD = """
import json, torch
from prism.codegen import compile_graph
from prism.ir.kinds import register
from tests.test_new_accumulator import fused, inputs, product
register(product())
cg = compile_graph(fused())
(x,) = inputs()
(got,) = cg(x)
print(json.dumps({"err": float((got - torch.exp(x.sum(1, keepdim=True))).abs().max()), "source": cg.source}))
"""


def test_generated_triton_runs_it_under_the_interpreter(tmp_path):
    out = json.loads(interpreted(CHILD, tmp_path, timeout=300)[-1])
    assert out["err"] < 1e-5
    assert " *= " in out["source"]   # its update, from its combine op's template
