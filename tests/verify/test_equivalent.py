"""prism.verify.equivalent on whole µGraphs: hand-written kernels verify, mutants do not, fuzzing is sound."""

import random

import pytest

import prism
from prism import verify, workloads
from prism.verify.fuzz import mutants, random_maps

SMALL = {
    "rmsnorm": {"n": 4, "d": 64},
    "rmsnorm_mlp": {"n": 4, "d": 64},
    "swiglu": {"n": 4, "d": 64},
    "attention": {"b": 2, "g": 4, "h": 32, "d": 8},
    "qk_attention": {"b": 2, "g": 4, "h": 32, "d": 8},
}


@pytest.mark.parametrize("name", workloads.names())
def test_hand_written_fused_graph_verifies(name):
    w = workloads.get(name)
    for cfg in (SMALL[name], w.configs[0]):
        verdict = verify.equivalent(w.build(cfg), w.fused(cfg))
        assert verdict.equal, verdict.reason


@pytest.mark.parametrize("name", workloads.names())
def test_hand_written_fused_graph_passes_the_numeric_check(name):
    w = workloads.get(name)
    cfg = SMALL[name]
    result = verify.random_test(w.build(cfg), w.fused(cfg))
    assert result.equal, result.reason
    assert len(result.choices) == 2 and result.choices[0] != result.choices[1]


def test_mutants_are_rejected_and_numerically_wrong():
    """Every single-node mutant of the five fused graphs: the checker never accepts a numerically
    wrong one, and at least 20 distinct wrong mutants exist and are rejected."""
    rejected_wrong = []
    for name in workloads.names():
        w = workloads.get(name)
        ref = w.build(SMALL[name])
        for label, mutant in mutants(w.fused(SMALL[name])):
            verdict = verify.equivalent(ref, mutant)
            numeric = verify.random_test(ref, mutant)
            if verdict.equal:
                assert numeric.equal, f"UNSOUND: {name} {label} accepted but {numeric.reason}"
            elif not numeric.equal:
                rejected_wrong.append(f"{name}: {label}")
    assert len(set(rejected_wrong)) >= 20, rejected_wrong


def test_specific_mutants_named_in_the_issue():
    w = workloads.get("rmsnorm")
    cfg = SMALL["rmsnorm"]
    ref, found = w.build(cfg), dict(mutants(w.fused(cfg)))
    wanted = ["imap[x] 1->0", "fmap 1->None", "omap[x] 1->None", "swap div operands", "swap matmul operands",
              "fmap 0->1"]
    for key in wanted:
        label = next(lb for lb in found if key in lb)
        assert not verify.equivalent(ref, found[label]).equal, label
        assert not verify.random_test(ref, found[label]).equal, label


@pytest.mark.parametrize("name", workloads.names())
def test_random_maps_fuzz_is_sound(name, capsys):
    w = workloads.get(name)
    ref, fused = w.build(SMALL[name]), w.fused(SMALL[name])
    rng = random.Random(name)
    accepted = gap = numeric_ok = 0
    samples = 40
    for _ in range(samples):
        cand = random_maps(fused, rng)
        verdict = verify.equivalent(ref, cand)
        numeric = verify.random_test(ref, cand)
        numeric_ok += numeric.equal
        if verdict.equal:
            accepted += 1
            assert numeric.equal, f"UNSOUND: accepted {cand} but {numeric.reason}"
        elif numeric.equal:
            gap += 1
    with capsys.disabled():
        print(f"\n{name}: {samples} random maps, checker accepted {accepted}, numeric accepted {numeric_ok}, "
              f"completeness gap {gap}/{max(numeric_ok, 1)}")


def test_signature_mismatches_are_not_equal():
    w = workloads.get("rmsnorm")
    a, b = w.build({"n": 4, "d": 64}), w.build({"n": 4, "d": 32})
    assert "input signatures differ" in verify.equivalent(a, b).reason
    with pytest.raises(prism.errors.VerificationError, match="candidate must be a KernelGraph"):
        verify.equivalent(a, "nope")


def test_size_dependent_shape_match_is_rejected():
    """A tile that matches another only at particular sizes is not a µGraph for all sizes."""
    g = prism.KernelGraph()
    x, y = g.input((8, 8), name="X"), g.input((8, 8), name="Y")
    g.output(g.add(x, y))
    b2 = prism.BlockGraph(grid=(2, 2), loop=1)
    tx = b2.input(x, imap={"x": 0})          # [4, 8] split by x
    ty = b2.input(y, imap={"y": 0})          # [4, 8] split by y: equal extents only because x == y
    b2.output(b2.accum(b2.add(tx, ty)), omap={"x": 0})
    f = prism.KernelGraph()
    fx, fy = f.input((8, 8), name="X"), f.input((8, 8), name="Y")
    f.output(*f.custom(b2, [fx, fy]))
    verdict = verify.equivalent(g, f)
    assert not verdict.equal and "agree only for some sizes" in verdict.reason
