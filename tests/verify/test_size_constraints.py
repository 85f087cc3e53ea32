"""Proofs under size constraints (prism.verify.size_constraints): split-KV attention forms that compute the program only
when their parallel sizes are related (prism.workloads.constrained: classes A-D), each proved under the
constraints it needs and refused without them.

Every accepted graph is run by the reference executor at every small size that satisfies its constraints
(`counterexamples`), and a verdict with a constraint dropped or weakened is caught there. Mutants that are
wrong at the constrained sizes are refused. A launch at sizes that break the constraints raises.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import pytest
import torch

import prism.workloads as wl
from prism import interp, verify
from prism.codegen import compile_graph
from prism.errors import ConstraintError, GraphError
from prism.ir import KernelGraph
from prism.ir.graph import check_sizes, parallel_sizes
from prism.ir.sizes import Constraint, Extent, violations
from prism.runtime.optimized import OptimizedGraph
from prism.search.result import SearchResult
from prism.tune.report import Report
from prism.tune.space import Space
from prism.workloads.constrained import CFG, CLASSES, class_d, size

REFERENCE = wl.get("attention").build(CFG)


def counterexamples(build, constraints: tuple[Constraint, ...], sizes: list[tuple[int, ...]],
                    cfg: dict = CFG) -> tuple[list[tuple[int, ...]], int]:
    """(the sizes satisfying `constraints` at which the graph builds but does not compute the program, how many
    satisfying sizes were run): every graph the sweep can build, run by the reference executor in float64."""
    w = wl.get("attention")
    inputs = w.inputs(cfg, dtype=torch.float64, seed=1)
    want = w.reference(*inputs)
    bad, ran = [], 0
    for args in itertools.product(*sizes):
        try:
            g = build(cfg, *args)
        except GraphError:
            continue   # sizes the graph does not exist at (the tiles do not fit)
        if violations(constraints, parallel_sizes(g)):
            continue
        ran += 1
        (got,) = interp.run(g, inputs, torch.float64)
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-9, atol=1e-9):
            bad.append(args)
    return bad, ran


@pytest.mark.parametrize("name", CLASSES)
def test_proved_under_its_constraints_and_refused_without(name):
    build, at, constraints, _ = CLASSES[name]
    g = build(CFG, *at)
    plain = verify.equivalent(REFERENCE, g)
    assert not plain.equal and plain.constraints == ()
    assert "not a valid µGraph for all parallel sizes" in plain.reason
    verdict = verify.equivalent(REFERENCE, g, constrained=True)
    assert verdict.equal, verdict.reason
    assert verdict.constraints == constraints, verdict.reason
    assert f"where {constraints[0]}" in verdict.reason and "custom op" in verdict.reason


@pytest.mark.parametrize("name", CLASSES)
def test_accepted_graphs_compute_the_program_at_every_size_their_constraints_allow(name):
    """The project's rule, that every accepted graph is also checked numerically, at every small size that
    satisfies the verdict's constraints; and random_test keeps to the constraints a graph carries."""
    build, at, _, sizes = CLASSES[name]
    g = build(CFG, *at)
    verdict = verify.equivalent(REFERENCE, g, constrained=True)
    bad, ran = counterexamples(build, verdict.constraints, sizes)
    assert not bad, f"UNSOUND: {name} proved where {verdict.constraints[0]}, wrong at {bad}"
    assert ran >= 4
    g.constraints = verdict.constraints
    numeric = verify.random_test(REFERENCE, g)
    assert numeric.equal and numeric.choices, numeric.reason
    for choice in numeric.choices:
        assert not violations(g.constraints, parallel_sizes(verify.numeric.with_sizes(g, choice)))


@pytest.mark.parametrize("constraints", [(), (Constraint.divides(size("i1"), size("y0")),)],
                         ids=["dropped", "weakened to i1 divides y0"])
def test_a_verdict_with_its_constraint_dropped_or_weakened_is_caught(constraints):
    """Were the verifier to state less than D needs (i1 = y0), the sweep above would find sizes at which
    the graph builds and is wrong: the constraint is what makes the proof sound."""
    build, _, _, sizes = CLASSES["D"]
    bad, _ = counterexamples(build, constraints, sizes)
    assert bad


@pytest.mark.parametrize("name", CLASSES)
def test_mutants_wrong_at_the_constrained_sizes_are_refused(name):
    build, at, constraints, _ = CLASSES[name]
    mutant = build(CFG, *at, mutant=True)
    assert not violations(constraints, parallel_sizes(mutant))
    numeric = verify.random_test(REFERENCE, mutant)
    assert not numeric.equal, "the mutant is right: the test is wrong"
    verdict = verify.equivalent(REFERENCE, mutant, constrained=True)
    assert not verdict.equal, f"UNSOUND: the {name} mutant proved: {verdict.reason}"
    assert "nor under size constraints" in verdict.reason


def _outside() -> KernelGraph:
    """D at loop range 2 over 4 splits: it builds, and computes a [b, g, 2d] tensor, not the program."""
    g = class_d(CFG, 4, 2, 2)
    g.constraints = CLASSES["D"][2]
    return g


def test_a_launch_outside_the_constraints_raises():
    g = _outside()
    assert g.output_tensors[0].shape != REFERENCE.output_tensors[0].shape
    inputs = wl.get("attention").inputs(CFG, seed=1)
    with pytest.raises(ConstraintError, match="i1 = y0 does not hold at i1=2, y0=4"):
        check_sizes(g)
    with pytest.raises(ConstraintError, match="i1 = y0"):
        compile_graph(g)(*inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # "no GPU"
        opt = OptimizedGraph(REFERENCE, g, Report("cost model", "cpu"), "cpu", torch_op=False)
    with pytest.raises(ConstraintError, match="i1 = y0"):
        opt(*inputs)
    check_sizes(class_d(CFG, 4, 2, 4))   # inside them: nothing to say


def test_constraints_travel_with_the_graph():
    """JSON keeps them; a copy into another graph renames its kernels' sizes; a size the graph lacks is
    refused."""
    g = _outside()
    again = KernelGraph.from_json(g.to_json())
    assert again.constraints == g.constraints and again.structural_hash() == g.structural_hash()
    assert g.structural_hash() != class_d(CFG, 4, 2, 2).structural_hash()
    assert g.map_blocks(lambda k, b: b).constraints == g.constraints
    two = KernelGraph()
    args = [two.input(t.shape, t.dtype, t.name) for t in g.inputs]
    g.replay(two, args)
    g.replay(two, args)
    assert [str(c) for c in two.constraints] == ["i1 = y0", "i3 = y2"]
    with pytest.raises(ConstraintError, match="does not have: y5"):
        g.constraints = [Constraint.equal(size("i1"), size("y5"))]


def test_the_tuner_instantiates_only_points_that_satisfy_a_graph_s_constraints(searched):
    """An sGraph proved under a constraint (here: the loop range divides 2) offers only the tilings that
    satisfy it, and every graph it instantiates carries it (so that its launch checks it)."""
    w, cfg, result = searched("attention")
    program = w.build(cfg)
    only = (Constraint.divides(size("i0"), Extent(2)),)
    graphs = [sg for sg in result.graphs if not sg.constraints]   # those proved for all sizes
    plain = SearchResult(program, graphs, result.stats)
    constrained = SearchResult(program, [dataclasses.replace(sg, constraints=only) for sg in graphs], result.stats)
    free, kept = Space(plain, program), Space(constrained, program)
    assert 0 < len(kept) < len(free)
    for gs in kept.graphs:
        assert {t for t in gs.tilings()} == {t for t in free.graphs[gs.index].tilings() if t[1] in (1, 2)}
    gs, dropped = next((gs, t) for gs in free.graphs for t in gs.tilings() if t[1] > 2)
    assert "i0 divides 2 does not hold" in " ".join(kept.graphs[gs.index].violations(*dropped))
    for c in kept.sample(10, seed=1):
        g = kept.instantiate(c)
        assert g.constraints == only
        check_sizes(g)
    assert SearchResult.from_json(constrained.to_json()).graphs[0].constraints == only


def test_a_group_count_over_a_factored_size_is_constrained_in_the_graph_s_sizes():
    """A Count whose extent names the fresh dim f of a Factor(r, (q, f)) states its constraint with f written
    r/q (prism.verify.size_constraints: at s', s'[f] = s[r]/s[q]). The constrained soundness fuzz
    (benchmarks/fuzz_soundness.py --constrained) found `equivalent` raising a ConstraintError there instead of
    giving a verdict: the constraint named the fresh 'y0_per_y1', which no launch can check."""
    from prism.verify.size_constraints import Assumed, Count, Factor, Whole, options

    assumed = Assumed((Factor("y0", ("y1", "y0_per_y1")),))
    extent = Extent(8).times((("y0_per_y1", 1), ("y1", 1), ("i0", -1)))
    (count,) = [a for a in options(Whole(extent, 4), assumed) if isinstance(a, Count)]
    assert count.constraint() == Constraint.divides(Extent(4), Extent(8).times((("y0", 1), ("i0", -1))))
    with pytest.raises(ConstraintError, match="y0_per_y1"):
        Count(extent, 4, "groups0").constraint()        # over the fresh dim itself: no constraint at all
    nested = Assumed((Count(Extent(8), 4, "groups0"),))  # a group count no size stands for: not offered
    assert not [a for a in options(Whole(Extent(8).times((("groups0", 1),)), 4), nested) if isinstance(a, Count)]


def test_the_constrained_soundness_fuzz_draws_proves_and_checks_near_every_class():
    """benchmarks/fuzz_soundness.py --constrained, small: candidates near each class (its sizes drawn, its maps
    redrawn or one node edited) get a verdict each, some are proved under constraints, and none proved is
    numerically different at sizes its constraints allow."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_soundness.py"
    spec = importlib.util.spec_from_file_location("fuzz_soundness", path)
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    for name in CLASSES:
        counts, unsound, _, seen = fuzz.constrained_task(name, 7, 40)
        assert counts["candidates"] == 40 and len(seen) > 20 and not unsound, (name, counts)
        assert counts["proved under constraints"] > 0, (name, counts)
