"""Ill-formed terms are refused when they are built, with a message naming the term and the reason."""

from __future__ import annotations

import pytest

from prism.errors import IllFormedTerm, VerificationError
from prism.verify.egraph import check
from prism.verify.expr import (
    Term, Var, add, bcast, comb, matmul, parse, part, red, repl, sum_,
)

X = Var("X", (8, 64))      # 2-D: data dims 0 (64 columns) and 1 (8 rows)
Y = Var("Y", (8, 32))
W = Var("W", (64, 48))
S = sum_(X, 0)             # [8, 1]

ILL_FORMED = {
    # the two mutants that an earlier checker "proved" equal to sum(X, 0)
    "dim-out-of-range (issue)": (lambda: comb(red(sum_(part(part(X, 2, "x0"), 0, "i0"), 0), "i0"), 2, "x0"),
                                 "data dim 2 does not exist"),
    "one pdim splits two dims (issue)": (lambda: comb(red(sum_(part(part(X, 1, "x0"), 0, "x0"), 0), "x0"), 1, "x0"),
                                         "x0 already indexes the family"),
    "part-dim-out-of-range": (lambda: part(X, 5, "x0"), "data dim 5 does not exist"),
    "sum-dim-out-of-range": (lambda: sum_(X, 2), "data dim 2 does not exist"),
    "repl-of-live-pdim": (lambda: repl(part(X, 0, "x0"), "x0"), "x0 already indexes the family"),
    "comb-not-live": (lambda: comb(X, 0, "x0"), "x0 is not live"),
    "red-not-live": (lambda: red(X, "x0"), "x0 is not live"),
    "red-twice": (lambda: red(red(repl(X, "x0"), "x0"), "x0"), "x0 is not live"),
    "split-extent-1": (lambda: part(S, 0, "x0"), "splits extent 1"),
    "bcast-of-full-dim": (lambda: bcast(X, 0), "only a dim of extent 1 broadcasts"),
    "sum-over-broadcast": (lambda: sum_(bcast(S, 0), 0), "is broadcast"),
    "no-broadcast": (lambda: add(X, Y), "extents of dim 0 differ"),
    "unit-without-bcast": (lambda: add(X, S), "extents of dim 0 differ"),
    "different-families": (lambda: add(part(X, 0, "x0"), part(X, 0, "y0")), "different families"),
    "family-and-plain": (lambda: add(repl(X, "x0"), X), "different families"),
    "ranks-differ": (lambda: add(X, Var("V", (64,))), "ranks 1 and 2"),
    "matmul-contraction": (lambda: matmul(W, X), "contraction extents differ: 48 vs 8"),
    "matmul-size-dependent": (lambda: matmul(part(repl(X, "y0"), 0, "x0"), part(repl(W, "x0"), 1, "y0")),
                              "equal only for some parallel sizes"),
    "matmul-rank-1": (lambda: matmul(Var("U", (4,)), Var("V", (4,))), "matmul of rank 1"),
}


@pytest.mark.parametrize("name", ILL_FORMED)
def test_ill_formed_term_is_refused_when_built(name: str) -> None:
    build, why = ILL_FORMED[name]
    with pytest.raises(IllFormedTerm, match=why) as err:
        build()
    assert isinstance(err.value, VerificationError) and "ill-formed term" in str(err.value)


def test_ill_formed_text_is_refused_when_parsed() -> None:
    """Terms travel to worker processes as text; the parsed term is typed like a built one."""
    good = comb(red(sum_(part(part(X, 1, "x0"), 0, "i0"), 0), "i0"), 1, "x0")
    assert parse(good.text) == good and parse(good.text).type == good.type
    with pytest.raises(IllFormedTerm):
        parse(good.text.replace('(Part (Var "X" "8x64") 1 "x0")', '(Part (Var "X" "8x64") 2 "x0")'))


def test_broadcasting_a_broadcast_dim_again_changes_nothing() -> None:
    assert bcast(bcast(S, 0), 0).type == bcast(S, 0).type


def test_types_say_what_a_term_is_over() -> None:
    t = part(repl(X, "y0"), 0, "x0")
    assert t.type.rank == 2 and t.type.live == {"x0", "y0"} and str(t.type) == "[8, 64/x0] over {x0, y0}"
    assert str(comb(part(X, 1, "x0"), 1, "x0").type) == "[8, 64]"
    assert bcast(S, 0).type.bcast == {0}


def test_untyped_terms_are_not_checked() -> None:
    """The checker needs to know what a term is over: inputs without a shape are refused."""
    with pytest.raises(VerificationError, match="typed terms"):
        check(sum_(Var("X"), 0), sum_(X, 0))
    assert Var("X").type is None and Term("exp", (Var("X"),)).type is None


def test_terms_of_different_types_are_not_equal_without_a_proof() -> None:
    res = check(comb(part(X, 1, "x0"), 0, "x0"), X)  # concatenates rows' chunks along columns
    assert not res.equal and res.reason == "not equal: [8/x0, 64·x0] vs [8, 64]"
    assert res.stats["iterations"] == 0
