"""Whatever the checker proves is true: random mutations of fused kernels, checked and evaluated."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.verify.egraph import check
from prism.verify.expr import BINARY, OPS, UNARY, Term, subterms

from tests.verify.pairs import POSITIVE, numeric_equal

FAMILIES = [UNARY, BINARY]


def _replace(t: Term, old: Term, new: Term) -> Term:
    if t == old:
        return new
    if not t.args:
        return t
    return Term(t.op, tuple(_replace(a, old, new) for a in t.args), t.attrs)


def _mutants(t: Term, pdims: list[str], draw) -> Term:
    """One random local change: a dim, a parallel dim, an op of the same family, an operand order,
    a dropped red, a constant."""
    nodes = [n for n in subterms(t) if n.op != "var"]
    n = draw(st.sampled_from(nodes))
    kinds = OPS[n.op].attrs
    choices = ["swap"] if len(n.args) == 2 else []
    choices += ["dim"] * ("dim" in kinds) + ["pdim"] * ("pdim" in kinds) + ["const"] * ("const" in kinds)
    choices += ["family"] * any(n.op in f for f in FAMILIES) + ["drop"] * (n.op in ("red", "repl", "part", "comb"))
    how = draw(st.sampled_from(choices))
    if how == "swap":
        new = Term(n.op, n.args[::-1], n.attrs)
    elif how in ("dim", "pdim", "const"):
        i = kinds.index(how)
        value = draw({"dim": st.integers(0, 2), "pdim": st.sampled_from(pdims),
                      "const": st.sampled_from([0.5, 2.0, 1 / 64])}[how])
        new = Term(n.op, n.args, n.attrs[:i] + (value,) + n.attrs[i + 1:])
    elif how == "family":
        fam = next(f for f in FAMILIES if n.op in f)
        new = Term(draw(st.sampled_from(fam)), n.args, n.attrs)
    else:
        new = n.args[0]
    return _replace(t, n, new)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_proven_mutants_are_numerically_equal(data) -> None:
    name = data.draw(st.sampled_from(sorted(POSITIVE)))
    cand, ref = POSITIVE[name]
    pdims = sorted({a for n in subterms(cand) for a in n.attrs if isinstance(a, str) and n.op != "var"})
    mutant = cand
    for _ in range(data.draw(st.integers(1, 2))):
        mutant = _mutants(mutant, pdims, data.draw)
    if check(mutant, ref, timeout=1.0).equal:
        assert numeric_equal(mutant, ref), f"proved equal but not equal: {mutant}  vs  {ref}"
