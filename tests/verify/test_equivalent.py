"""prism.verify.equivalent on whole µGraphs: hand-written kernels verify, mutants do not, fuzzing is sound."""

import random

import pytest

import prism
from prism import verify, workloads
from prism.verify.fuzz import mutants, random_maps

SMALL = {n: workloads.get(n).small_config for n in workloads.names()} | {
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
    """Every single-node mutant of the workloads' fused graphs: the checker never accepts a numerically wrong
    one; at least 20 distinct wrong mutants are rejected; and each kind of mutation (wrong imap, fmap,
    omap, swapped div operands, another unary op, a changed sum dim or constant) is among them."""
    kinds = ["imap", "fmap", "omap", "swap div", "sum dim", "value x2", "exp->", "silu->"]  # swapped matmuls never fit
    caught = {k: 0 for k in kinds}
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
                kind = next((k for k in kinds if k in label), None)
                caught[kind] = caught.get(kind, 0) + 1
    assert len(set(rejected_wrong)) >= 20, rejected_wrong
    assert all(caught[k] for k in kinds), caught


@pytest.mark.parametrize("name", workloads.names())
def test_random_maps_fuzz_is_sound(name, capsys):
    w = workloads.get(name)
    ref, fused = w.build(SMALL[name]), w.fused(SMALL[name])
    rng = random.Random(name)
    accepted = gap = numeric_ok = 0
    samples = 36
    for k in range(samples):
        cand = random_maps(fused, rng, keep=0.0 if k % 3 == 0 else 0.8)   # uniform, and near the fused maps
        verdict = verify.equivalent(ref, cand)
        numeric = verify.random_test(ref, cand)
        correct = numeric.equal and numeric.all_varied   # equal with every parallel size > 1
        numeric_ok += correct
        if verdict.equal:
            accepted += 1
            assert numeric.equal, f"UNSOUND: accepted {cand} but {numeric.reason}"
        elif correct:
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
    assert not verdict.equal and "equal only for some parallel sizes" in verdict.reason
