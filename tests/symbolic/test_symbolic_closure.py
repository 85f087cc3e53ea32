"""The target closure: sound rules (every whole form computes the program), the forms pruning needs."""

import pytest
import torch

import prism.workloads as wl
from prism.symbolic.closure import closure
from prism.symbolic.dims import AtomSpace, InvExtent
from prism.symbolic.terms import evaluate, from_graph, kids, leaf, mk, op_of, render, subterms

DISTINCT = (4, 12, 10, 6, 3)
"""Sizes for a workload's dims in order, all different: no dims of the program coincide by accident."""


def target_of(name, cfg=None):
    w = wl.get(name)
    cfg = cfg or dict(zip(w.dims, DISTINCT))
    g = w.build(cfg)
    space = AtomSpace(tuple(t.shape for t in g.inputs))
    (root,) = from_graph(g)
    return w, cfg, g, closure(root, space)


@pytest.mark.parametrize("name", wl.names())
def test_every_whole_form_computes_the_program(name):
    """Each rule is sound: every root of the closure evaluates to the program's output."""
    w, cfg, g, target = target_of(name)
    assert target.complete
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.5 for t in g.inputs]
    want = w.reference(*inputs)
    for root in target.roots:
        assert torch.allclose(evaluate(root, inputs), want, rtol=1e-10, atol=1e-12), render(root)


def test_rmsnorm_closure_holds_the_fused_kernels_terms():
    _, cfg, _, target = target_of("rmsnorm")
    x, w = leaf(0), leaf(1)
    ss = mk("sum", (1,), mk("square", (), x))
    r = mk("sqrt", (), mk("add_scalar", (wl.EPS,), mk("mul_scalar", (InvExtent(0, 1),), ss)))
    assert mk("div", (), mk("matmul", (), x, w), r) in target.roots
    assert {ss, r, mk("matmul", (), x, w)} <= target.subterms
    assert ("mul_scalar", (InvExtent(0, 1),)) in target.vocabulary


def test_attention_closure_moves_the_normalisation_past_the_second_matmul():
    _, _, _, target = target_of("attention")
    q, kt, v = leaf(0), leaf(1), leaf(2)
    s = mk("matmul", (), q, kt)
    for e in (mk("exp", (), s), mk("exp", (), mk("sub", (), s, mk("max", (2,), s)))):
        assert mk("div", (), mk("matmul", (), e, v), mk("sum", (2,), e)) in target.roots
    assert {op for op, _ in target.vocabulary} == {"matmul", "max", "sub", "exp", "sum", "div"}


def test_the_shift_never_splits_a_softmax():
    """exp(a) / sum(exp(a - max a)) is not a softmax: the shift rewrites numerator and denominator together,
    and only where the numerator's exp is the denominator's."""
    _, _, _, target = target_of("qk_attention")
    for root in target.roots:
        exps = {s for s in subterms(root) if op_of(s) == "exp"}
        assert len({op_of(kids(e)[0]) == "sub" for e in exps}) == 1, render(root)


def test_the_closure_is_size_independent():
    """1/N stays symbolic, so the same closure serves every config of a workload."""
    small = target_of("rmsnorm", {"n": 4, "d": 12})[3]
    large = target_of("rmsnorm", {"n": 8, "d": 4096})[3]
    assert small.roots == large.roots and small.subterms == large.subterms
