"""The expression language (construction, text round trip) and its numeric model."""

from __future__ import annotations

import math

import pytest
import torch

from prism.errors import VerificationError
from prism.verify.expr import (
    TERMS, UNARY, Sym, Term, Var, add, bcast, comb, div, is_ground, make, matmul, max_, maximum, mul, neg, once, parse,
    part, pdims_of, red, redmax, repl, scale, shift, sub, subterms, sum_,
)
from prism.verify.model import IllFormed, evaluate, same_value

X, Y = Var("X"), Var("Y")


def every_op() -> Term:
    """One term that uses every constructor of the term language."""
    t = neg(X)
    for f in UNARY:  # every element-wise op
        t = make(f, t)
    t = matmul(t, Y)
    t = div(sub(mul(add(t, t), t), t), bcast(sum_(t, 0), 0))
    t = maximum(t, bcast(max_(t, 0), 0))
    t = shift(scale(t, 0.25), -1e-6)
    return once(red(redmax(comb(repl(repl(repl(part(t, 1, "x0"), "y0"), "z0"), "w0"), 1, "x0"), "z0"), "y0"), "w0")


def test_every_op_round_trips_through_text() -> None:
    t = every_op()
    assert {n.op for n in subterms(t)} == set(TERMS)
    assert parse(t.text) == t
    assert str(t).startswith("once(red(redmax(comb(repl(repl(repl(part(shift(scale(maximum(")


def test_model_evaluates_every_op() -> None:
    v = evaluate(every_op(), env(X=(4, 6), Y=(6, 6)), {"x0": 2, "y0": 3, "z0": 2, "w0": 2})
    assert v.pdims == () and v.data.shape == (4, 6)


def test_commutative_operands_are_sorted() -> None:
    assert add(X, Y) == add(Y, X) and mul(X, Y) == mul(Y, X)
    assert sub(X, Y) != sub(Y, X) and div(X, Y) != div(Y, X)
    assert hash(add(X, Y)) == hash(add(Y, X))


def test_constants_are_floats_and_print_for_egglog() -> None:
    assert scale(X, 2).attrs == (2.0,) and make("scale", X, attrs=(3,)).attrs == (3.0,)
    assert "1e-06" in shift(X, 1e-6).text


@pytest.mark.parametrize("build", [
    lambda: part(X, -1, "x0"), lambda: part(X, 0, "has space"), lambda: red(X, 3),
    lambda: scale(X, math.inf), lambda: Term("nope"), lambda: Term("exp", (X, X)), lambda: Var("1bad"),
    lambda: part(X, Sym("p", "pdim"), "x0"),
])
def test_bad_terms_are_refused(build) -> None:
    with pytest.raises(VerificationError):
        build()


@pytest.mark.parametrize("text", ['', '(Part (Var "X") 0)', '(Nope)', '(Var "X") extra', '(Unary "tan" (Var "X"))'])
def test_bad_text_is_refused(text: str) -> None:
    with pytest.raises(VerificationError):
        parse(text)


def test_ground_and_pdims() -> None:
    assert is_ground(every_op()) and not is_ground(part(Var("?t"), Sym("d", "dim"), "x0"))
    assert pdims_of(every_op()) == {"w0", "x0", "y0", "z0"}


# ---------------------------------------------------------------- model

def env(**shapes):
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn(s, generator=g, dtype=torch.float64) for k, s in shapes.items()}


def test_loader_order_matches_the_encoder() -> None:
    """part(part(T, d, x), d, i): block x gets chunk x of T, iteration i sub-chunk i of that chunk."""
    e = env(T=(2, 12))
    v = evaluate(part(part(Var("T"), 0, "x"), 0, "i"), e, {"x": 3, "i": 2})
    assert v.pdims == ("i", "x")
    for xi in range(3):
        for ii in range(2):
            start = xi * 4 + ii * 2
            assert torch.equal(v.data[ii, xi], e["T"][:, start:start + 2])


def test_comb_inverts_part_and_red_of_repl_scales() -> None:
    e = env(X=(4, 6))
    for d in (0, 1):
        assert same_value(evaluate(comb(part(X, d, "p"), d, "p"), e, {"p": 2}), evaluate(X, e, {}))
    three_x = evaluate(red(repl(X, "p"), "p"), e, {"p": 3})
    assert torch.allclose(three_x.data, 3 * e["X"])
    assert same_value(evaluate(red(repl(X, "p"), "p"), e, {"p": 1}), evaluate(X, e, {}))


def test_broadcast_operands() -> None:
    e = env(X=(4, 6), Y=(4, 6))
    s = bcast(sum_(Y, 0), 0)
    v = evaluate(div(X, s), e, {})
    assert torch.allclose(v.data, e["X"] / e["Y"].sum(-1, keepdim=True)) and not v.bdims
    assert evaluate(s, e, {}).bdims == {0}
    assert same_value(evaluate(part(s, 0, "p"), e, {"p": 3}), evaluate(repl(s, "p"), e, {"p": 3}))


@pytest.mark.parametrize("term,sizes,why", [
    (part(X, 0, "p"), {"p": 4}, "cannot split"),
    (part(X, 0, "p"), {}, "no size"),
    (part(part(X, 0, "p"), 1, "p"), {"p": 2}, "already indexes"),
    (red(X, "p"), {"p": 2}, "does not index"),
    (add(part(X, 0, "p"), X), {"p": 2}, "families differ"),
    (add(X, sum_(X, 0)), {}, "neither operand is broadcast"),
    (bcast(X, 0), {}, "needs extent 1"),
    (sum_(bcast(sum_(X, 0), 0), 0), {}, "sum over broadcast"),
    (matmul(X, X), {}, "do not fit"),
    (comb(bcast(part(sum_(X, 0), 1, "p"), 0), 0, "p"), {"p": 2}, "members that differ"),
    (matmul(bcast(sum_(X, 0), 0), bcast(sum_(X, 1), 1)), {}, "two broadcast dims"),
])
def test_ill_formed_terms_raise(term: Term, sizes: dict, why: str) -> None:
    with pytest.raises(IllFormed, match=why):
        evaluate(term, env(X=(4, 6)), sizes)
