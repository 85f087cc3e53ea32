"""Every axiom holds numerically at every instance the e-graph could use it at."""

from __future__ import annotations

import pytest

from prism.verify.axioms import Rule, all_rules, rules, sum_forms
from prism.verify.expr import Var, part, red, subterms, sum_
from prism.errors import IllFormedTerm
from prism.verify.expr import Term
from prism.verify.instances import Shapes, bindings, ground, infer_shapes, random_env, wrappers
from prism.verify.model import IllFormed, evaluate, same_value

ALL = all_rules(max_pdims=3)
# sizes for P0, P1, P2 (the rule's parallel dims) and W (an extra family the inputs may carry):
# sizes other than 1, pairs of different sizes, and sizes of 1 (where e.g. red(repl(t)) = t by accident)
SIZES = [{"P0": 2, "P1": 3, "P2": 2, "W": 2}, {"P0": 3, "P1": 1, "P2": 2, "W": 3}, {"P0": 1, "P1": 2, "P2": 3, "W": 1}]


def check_rule(rule: Rule, rank: int = 3) -> int:
    """Evaluate both sides at every instance; return how many instances had finite values to compare."""
    informative = 0
    directions = [(rule.lhs, rule.rhs)] + ([(rule.rhs, rule.lhs)] if rule.both else [])
    for i, b in enumerate(bindings(rule, rank)):
        for src_pat, dst_pat in directions:
            # inputs are named after the pattern variables, upper-cased: ?t -> T
            for wname, leaf in wrappers(ground(src_pat, b, lambda n: Var(n.upper())), rank):
                src, dst = (ground(pat, b, lambda n, leaf=leaf: leaf(n.upper())) for pat in (src_pat, dst_pat))
                try:
                    shapes = infer_shapes(src, rank)
                except IllFormedTerm:
                    continue  # the rewrite can never match a well-formed term here
                well_formed(rule, src, dst, shapes)
                for j, sizes in enumerate(SIZES):
                    try:
                        env = random_env(shapes.extents(sizes, salt=i + j), seed=100 * i + j)
                    except IllFormedTerm:
                        break
                    try:
                        x = evaluate(src, env, sizes)
                    except IllFormed:
                        continue
                    try:
                        y = evaluate(dst, env, sizes)
                    except IllFormed as err:
                        pytest.fail(f"{rule}\n  {src}  is well formed but  {dst}  is not: {err}\n  sizes {sizes}")
                    assert same_value(x, y), f"{rule}\n  {src} != {dst}\n  sizes {sizes}, inputs {wname}"
                    informative += int(x.data.isfinite().any())
    return informative


def well_formed(rule: Rule, src: Term, dst: Term, shapes: Shapes) -> None:
    """The side conditions make an ill-formed right-hand side impossible: where `src` is well formed
    (for the inferred shapes, all sizes), `dst` is too, with no further equality, and of the same type."""
    want = shapes.type_of(src)
    shapes.frozen = True
    try:
        got = shapes.type_of(dst)
    except IllFormedTerm as err:
        pytest.fail(f"{rule}\n  {src}  is well formed but  {dst}  is not: {err}")
    finally:
        shapes.frozen = False
    assert got == want, f"{rule}\n  rewrites {src} of type {want} to {dst} of type {got}"


@pytest.mark.parametrize("rule", ALL, ids=[r.name for r in ALL])
def test_axiom_holds_numerically(rule: Rule) -> None:
    assert check_rule(rule) > 0, f"{rule} has no well-formed instance: it is untested"


LOADED = rules(3)


def _batched(rule: Rule) -> bool:
    return any(c[0] == ">=" for c in rule.when) or any(n.op == "matmul" for n in subterms(rule.lhs))


# matrices for every rule with an instance there; rank 4 (two batch dims) where batch dims matter
OTHER_RANKS = [(r, 2) for r in LOADED if not any(c[0] == ">=" for c in r.when)] + [(r, 4) for r in LOADED
                                                                                    if _batched(r)]


@pytest.mark.parametrize("rule,rank", OTHER_RANKS, ids=[f"{r.name}-rank{n}" for r, n in OTHER_RANKS])
def test_loaded_axiom_holds_at_other_ranks(rule: Rule, rank: int) -> None:
    """Matrices (rank 2) and rank-4 tensors, where a data dim >= 2 can be more than one batch dim."""
    assert check_rule(rule, rank) > 0, f"{rule} has no well-formed instance at rank {rank}"


def test_rule_names_unique() -> None:
    names = [r.name for r in ALL]
    assert len(names) == len(set(names))


def test_loaded_rules_are_in_the_tested_set() -> None:
    tested = {r.name for r in ALL}
    assert all(r.name in tested for r in rules(3, shortcuts=True))


def test_both_way_rules_keep_their_variables() -> None:
    """A rule loaded right-to-left must not invent variables (the paper's §6 constraint)."""
    def var_names(t):
        return {str(n) for n in subterms(t) if n.op == "var"} | {
            a.name for n in subterms(t) for a in n.attrs if hasattr(a, "kind")}
    for r in rules(3):
        assert var_names(r.rhs) <= var_names(r.lhs), r
        if r.both:
            assert var_names(r.lhs) <= var_names(r.rhs), r


def test_sum_forms_grow_with_depth() -> None:
    assert [len(list(sum_forms(n))) for n in (1, 2, 3)] == [4, 16, 96]


def test_paper_form_7_is_false_without_a_sum() -> None:
    """red(red(part(part(t,d,p0),d,p1),p0),p1) = red(part(t,d,p0),p0) as the paper states it: the
    extents differ (D/(n0 n1) vs D/n0), so Prism keeps it only under a sum."""
    t = Var("T")
    lhs = red(red(part(part(t, 0, "p"), 0, "q"), "p"), "q")
    rhs = red(part(t, 0, "p"), "p")
    env = random_env({"T": (4, 12)}, seed=0)
    x, y = evaluate(lhs, env, {"p": 2, "q": 3}), evaluate(rhs, env, {"p": 2, "q": 3})
    assert not same_value(x, y)
    assert same_value(evaluate(sum_(lhs, 0), env, {"p": 2, "q": 3}), evaluate(sum_(rhs, 0), env, {"p": 2, "q": 3}))


def _unsound() -> list[Rule]:
    """Plausible-looking rules that are false; the reference implementation has several of them."""
    from prism.verify.axioms import R, a, b, c, d, e, p, q, t, v
    from prism.verify.expr import add, bcast, comb, div, matmul, mul, once, relu, repl
    return [
        R("ref-52-swapped-div", comb(div(repl(bcast(v, d), p), part(a, d, p)), d, p), div(a, bcast(v, d))),
        R("ref-82-drop-repl", repl(t, p), t),
        R("red-of-repl", red(repl(t, p), p), t),
        R("once-of-red", once(repl(t, p), p), red(repl(t, p), p)),   # one copy is not the sum of the copies
        R("once-of-part", once(part(a, 0, p), p), comb(part(a, 0, p), 0, p)),   # the first chunk is not them all
        R("ref-10-unbroadcast-div", matmul(div(a, v), b), div(matmul(a, b), v)),
        R("ref-81-unbroadcast-part", div(part(a, 0, p), repl(v, p)), part(div(a, v), 0, p)),
        R("rows-any-dim", matmul(part(a, d, p), repl(b, p)), part(matmul(a, b), d, p)),
        R("comb-part-same-dim", comb(part(t, d, q), d, p), part(comb(t, d, p), d, q)),
        R("paper-form-7", red(red(part(part(t, d, p), d, q), p), q), red(part(t, d, p), p)),
        R("comb-into-div", comb(div(a, b), d, p), div(comb(a, d, p), comb(b, d, p))),
        R("relu-red", red(relu(t), p), relu(red(t, p))),
        R("factor-matmul", add(matmul(a, c), matmul(b, c)), matmul(add(a, b), c)),
        R("row-scale-wrong-dim", matmul(mul(a, bcast(v, 1)), b), mul(matmul(a, b), bcast(v, 1))),
        R("sum-part-same-dim", sum_(part(t, d, p), d), part(sum_(t, d), d, p)),
        R("part-bcast-any-dim", part(bcast(v, d), e, p), bcast(part(v, e, p), d)),
        R("ill-formed-right-side", red(part(t, d, p), p), part(sum_(part(t, d, p), d), d, p)),  # splits twice
    ]


@pytest.mark.parametrize("rule", _unsound(), ids=[r.name for r in _unsound()])
def test_unsound_rules_are_caught(rule: Rule) -> None:
    """The numeric test is only worth something if it rejects false axioms."""
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        assert check_rule(rule) > 0
