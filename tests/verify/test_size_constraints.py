"""Proofs under size constraints (prism.verify.sizes): split-KV attention forms that compute the program only
when their parallel sizes are related, each proved under the constraints it needs and refused without them.

Kernel 1 is the paper's split-KV kernel with partials (prism.workloads.attention): a block per (batch, split)
saves its numerator [g, d] and denominator [g, 1] side by side along the last dim. Kernel 2 folds the splits:
  A  its loop walks the partials; each iteration group-sums its numerator tile and sums its denominators
     (right when the loop range i1 divides the split count y0: every tile holds whole partials);
  B  kernel 1 folds each exp tile into groups of S columns (group_sum) before it sums over the loop, and
     kernel 2 sums those (right when the tile h/(i0·y0) holds whole groups: i0·y0 divides h/S);
  C  its grid dim y splits the denominators, one per split, and its blocks' sums are added (right when y1
     divides y0); the numerators are group-summed by the kernel graph;
  D  its loop accumulator is the group sum: one split's numerator and denominator per iteration (right only
     when the loop range equals the split count: i1 = y0; elsewhere the output has the wrong shape).
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
from prism.ir import BlockGraph, KernelGraph
from prism.ir.sizes import Constraint, Extent, check, parallel_sizes, violations
from prism.runtime.optimized import OptimizedGraph
from prism.search.result import SearchResult
from prism.tune.report import Report
from prism.tune.space import Space

CFG = {"b": 2, "g": 4, "h": 32, "d": 8}
S = 4
"""B's group size: kernel 1 folds each exp tile into S columns."""


def size(name: str) -> Extent:
    return Extent(1, ((name, 1),))


def _kernel1(g: KernelGraph, cfg: dict, splits: int, loop: int, fold: str = "") -> tuple:
    """The program's inputs and kernel 1's partials: numerators [b, g, splits·d] and denominators
    [b, g, splits] (or, with `fold` a group op, each split's exp tile folded into S columns: [b, g, splits·S])."""
    b, q_, h, d = cfg["b"], cfg["g"], cfg["h"], cfg["d"]
    q, kt, v = g.input((b, q_, d), "float16", "Q"), g.input((b, d, h), "float16", "Kt"), \
        g.input((b, h, d), "float16", "V")
    k1 = BlockGraph(grid=(b, splits), loop=loop)
    bq, bk = k1.input(q, imap={"x": 0}), k1.input(kt, imap={"x": 0, "y": 2}, fmap=2)
    bv = k1.input(v, imap={"x": 0, "y": 1}, fmap=1)
    e = k1.exp(k1.matmul(bq, bk))                                          # [1, g, h/(splits·loop)]
    k1.output(k1.accum(k1.matmul(e, bv)), omap={"x": 0, "y": 2})
    k1.output(k1.accum(getattr(k1, fold)(e, 2, S) if fold else k1.sum(e, 2)), omap={"x": 0, "y": 2})
    return g.custom(k1, [q, kt, v])


def class_a(cfg: dict, splits: int, loop: int, loop2: int, mutant: bool = False) -> KernelGraph:
    """Mutant: group_max of each numerator tile (right only when a tile holds one split)."""
    g = KernelGraph()
    num, den = _kernel1(g, cfg, splits, loop)
    k2 = BlockGraph(grid=(cfg["b"],), loop=loop2)
    n = k2.input(num, imap={"x": 0}, fmap=2)                               # [1, g, d·y0/i1]
    ns = k2.accum((k2.group_max if mutant else k2.group_sum)(n, 2, cfg["d"]))
    ds = k2.accum(k2.sum(k2.input(den, imap={"x": 0}, fmap=2), 2))        # [1, g, y0/i1] summed
    k2.output(k2.div(ns, ds), omap={"x": 0})
    (o,) = g.custom(k2, [num, den])
    g.output(o)
    return g


def class_b(cfg: dict, splits: int, loop: int, mutant: bool = False) -> KernelGraph:
    """Mutant: each exp tile folded by group_max (a max of columns, then summed over the loop)."""
    g = KernelGraph()
    num, den = _kernel1(g, cfg, splits, loop, fold="group_max" if mutant else "group_sum")
    k2 = BlockGraph(grid=(cfg["b"],), loop=1)
    ns = k2.group_sum(k2.accum(k2.input(num, imap={"x": 0})), 2, cfg["d"])
    ds = k2.sum(k2.accum(k2.input(den, imap={"x": 0})), 2)
    k2.output(k2.div(ns, ds), omap={"x": 0})
    (o,) = g.custom(k2, [num, den])
    g.output(o)
    return g


def class_c(cfg: dict, splits: int, loop: int, splits2: int, mutant: bool = False) -> KernelGraph:
    """Mutant: each block takes the max of its denominators instead of their sum."""
    g = KernelGraph()
    num, den = _kernel1(g, cfg, splits, loop)
    k2 = BlockGraph(grid=(cfg["b"], splits2), loop=1)
    t = k2.accum(k2.input(den, imap={"x": 0, "y": 2}))                     # [1, g, y0/y1]
    k2.output((k2.max if mutant else k2.sum)(t, 2), omap={"x": 0})         # blocks along y add up
    (ds,) = g.custom(k2, [den])
    g.output(g.div(g.group_sum(num, 2, cfg["d"]), ds))
    return g


def class_d(cfg: dict, splits: int, loop: int, loop2: int, mutant: bool = False) -> KernelGraph:
    """Mutant: the denominators' accumulator takes their max (accum_max), not their sum."""
    g = KernelGraph()
    num, den = _kernel1(g, cfg, splits, loop)
    k2 = BlockGraph(grid=(cfg["b"],), loop=loop2)
    ns = k2.accum(k2.input(num, imap={"x": 0}, fmap=2))                   # [1, g, d·y0/i1]
    ds = k2.accum(k2.sum(k2.input(den, imap={"x": 0}, fmap=2), 2), "accum_max" if mutant else "accum")
    k2.output(k2.div(ns, ds), omap={"x": 0})
    (o,) = g.custom(k2, [num, den])
    g.output(o)
    return g


CLASSES = {
    # builder, sizes it is proved at, the constraints it needs, the sizes the sweep tries per argument
    "A": (class_a, (4, 2, 2), (Constraint.divides(size("i1"), size("y0")),), [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
    "B": (class_b, (2, 2), (Constraint.divides(size("i0").times(size("y0").mono), Extent(CFG["h"] // S)),),
          [(1, 2, 4, 8, 16), (1, 2, 4, 8)]),
    "C": (class_c, (4, 2, 2), (Constraint.divides(size("y1"), size("y0")),), [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
    "D": (class_d, (4, 2, 4), (Constraint.equal(size("i1"), size("y0")),), [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
}

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
        check(g)
    with pytest.raises(ConstraintError, match="i1 = y0"):
        compile_graph(g)(*inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # "no GPU"
        opt = OptimizedGraph(REFERENCE, g, Report("cost model", "cpu"), "cpu", torch_op=False)
    with pytest.raises(ConstraintError, match="i1 = y0"):
        opt(*inputs)
    check(class_d(CFG, 4, 2, 4))   # inside them: nothing to say


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
    constrained = SearchResult(program, [dataclasses.replace(sg, constraints=only) for sg in result.graphs],
                               result.stats)
    free, kept = Space(result, program), Space(constrained, program)
    assert 0 < len(kept) < len(free)
    for gs in kept.graphs:
        assert {t for t in gs.tilings()} == {t for t in free.graphs[gs.index].tilings() if t[1] in (1, 2)}
    gs, dropped = next((gs, t) for gs in free.graphs for t in gs.tilings() if t[1] > 2)
    assert "i0 divides 2 does not hold" in " ".join(kept.graphs[gs.index].violations(*dropped))
    for c in kept.sample(10, seed=1):
        g = kept.instantiate(c)
        assert g.constraints == only
        check(g)
    assert SearchResult.from_json(constrained.to_json()).graphs[0].constraints == only
