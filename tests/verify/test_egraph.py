"""The e-graph checker proves fused kernels equal to their programs and rejects wrong ones.

Every pair (tests/verify/pairs.py) is also evaluated numerically, so a wrong pair cannot pass as a
checker result.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from prism.verify.axioms import derived_rules, rules
from prism.verify.egraph import RECREATE_EVERY, check, check_all, egglog_rules
from prism.verify.expr import Var, div, matmul, parse
from tests.verify.pairs import NEGATIVE, POSITIVE, W, X, numeric_equal, rms, rmsnorm, two_kernels


@pytest.mark.parametrize("name", POSITIVE)
def test_positive_pairs_are_proven(name: str) -> None:
    cand, ref = POSITIVE[name]
    assert numeric_equal(cand, ref), "the test pair itself is wrong"
    res = check(cand, ref)
    assert res.equal, f"{name}: {res.reason} {res.stats}"
    assert check(ref, cand).equal, "the checker is symmetric"


@pytest.mark.parametrize("name", NEGATIVE)
def test_negative_pairs_are_rejected(name: str) -> None:
    cand, ref = NEGATIVE[name]
    assert not numeric_equal(cand, ref), "the model must confirm the pair differs"
    res = check(cand, ref)
    assert not res.equal, f"{name} was proven equal: an axiom is unsound"


def test_result_reports_stats() -> None:
    res = check(*POSITIVE["rmsnorm"])
    assert res.reason == "equal" and res.stats["iterations"] > 0 and res.stats["nodes"] > 0


def test_caps_stop_the_check() -> None:
    cand, ref = POSITIVE["attention-split-kv"]
    assert check(cand, ref, max_iters=1).reason.startswith("not proven: iteration cap")
    assert check(cand, ref, max_nodes=10, step=1).reason.startswith("not proven: node cap")
    assert check(cand, ref, timeout=0.0).reason.startswith("not proven: time cap")


def test_checks_are_independent_and_survive_recreation() -> None:
    """push/pop isolates checks, and the e-graph is rebuilt every RECREATE_EVERY checks."""
    cand, ref = POSITIVE["swiglu"]
    first = check(cand, ref)
    for _ in range(RECREATE_EVERY + 3):
        assert not check(*NEGATIVE["red-of-repl"]).equal
    again = check(cand, ref)
    assert again.equal and again.stats["iterations"] == first.stats["iterations"]
    assert again.stats["nodes"] == first.stats["nodes"]


def _worker(texts: tuple[str, str]) -> bool:
    from prism.verify.egraph import check as chk
    return chk(parse(texts[0]), parse(texts[1])).equal


def test_spawned_workers_check_terms_sent_as_text() -> None:
    pairs = [(c.text, r.text) for c, r in (POSITIVE["rmsnorm"], NEGATIVE["red-of-repl"])]
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.map(_worker, pairs) == [True, False]


def _ground_instances(rule):
    """The rule at every binding where it is well formed, with plain inputs of inferred shapes (derived
    rules need no input families)."""
    from prism.errors import IllFormedTerm
    from prism.verify.instances import bindings, families, ground, infer_shapes, with_shapes
    for b in bindings(rule):
        lhs, rhs = (ground(s, b, lambda n: Var(n.upper())) for s in (rule.lhs, rule.rhs))
        if families(lhs) == {} and families(rhs) == {}:
            try:
                shapes = infer_shapes(lhs).extents({f"P{k}": k + 2 for k in range(4)})
            except IllFormedTerm:
                continue
            yield with_shapes(lhs, shapes), with_shapes(rhs, shapes)


@pytest.mark.parametrize("rule", derived_rules(3), ids=[r.name for r in derived_rules(3)])
def test_derived_rules_follow_from_the_loaded_ones(rule) -> None:
    """What is not loaded must be provable: the paper's table forms, the compound sums, the patterns."""
    instances = list(_ground_instances(rule))
    assert instances
    for lhs, rhs in instances:
        res = check(lhs, rhs)
        assert res.equal, f"{rule}: {lhs} vs {rhs}: {res.reason}"


def test_family_rules_are_the_tested_rules() -> None:
    """A rule emitted once for a whole op family equals, per op, a rule the numeric tests cover."""
    from prism.verify.expr import TERMS
    loaded = rules(3)
    texts = {r.egglog() for r in loaded}
    generic = [line for line in egglog_rules(loaded) if " fam" in line]
    assert generic
    for line in generic:
        ctor = line.split("(")[2].split()[0]
        for name, info in TERMS.items():
            if info.egg == ctor:
                assert line.replace("fam", f'"{name}"') in texts, (line, name)


def test_shortcut_rules_load_and_prove() -> None:
    cand, ref = POSITIVE["row-sums"]
    assert check(cand, ref, shortcuts=True, max_pdims=3).equal


def test_check_all_batches_candidates_against_one_reference() -> None:
    ref = matmul(div(X, rms(X, 64)), W)
    names = ["rmsnorm-comb-wrong-dim", "rmsnorm-swapped-div", "rmsnorm-wrong-constant"]
    cands = [rmsnorm()] + [NEGATIVE[n][0] for n in names] + [two_kernels()]
    results = check_all(ref, cands)
    assert [r.equal for r in results] == [True, False, False, False, True]
    assert all(r.stats["batch"] == 5 for r in results)
    assert [r.equal for r in results] == [check(ref, c).equal for c in cands]
