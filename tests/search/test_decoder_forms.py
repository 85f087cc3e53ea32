"""Forms a real decoder layer needs, at sizes where a block cannot hold a whole row of weights: the
projection's contracted dim walked by the loop.

Seen on a Llama-shaped model (hidden 2048, MLP 5632): Hugging Face's RMSNorm multiplies the normalized row
by a weight, and the verifier could not move the norm's quotient out of that product, so no form of a
norm with a weight before a projection had a loop; a residual added to a projection (r + X @ W) had none
either, since the residual's loop-invariant tile could not meet the accumulated product after the loop.
Each region then ran unfused or with one block per output tile holding all of K."""

from __future__ import annotations

import pytest

import prism
from prism.search import search


def _loop_forms(graph: prism.KernelGraph, contracted: int) -> list:
    """The verified graphs whose loop walks the contracted dim (its atom in the search's space)."""
    result = search(graph, workers=1, time_limit=300)
    assert result.stats["cross_check"]["unsound"] == 0 and result.stats["cross_check"]["checked"] == len(result)
    return [g for g in result.graphs if contracted in g.mapping.loop]


def _norm_projection(weighted: bool) -> prism.KernelGraph:
    """x / sqrt(mean(x²) + eps) (· g) @ W, as the backend lowers Hugging Face's RMSNorm and a Linear."""
    g = prism.KernelGraph()
    x = g.input((8, 256), dtype="float16", name="X")
    gain = g.input((1, 256), dtype="float16", name="G") if weighted else None
    w = g.input((256, 128), dtype="float16", name="W")
    r = g.sqrt(g.add_scalar(g.mul_scalar(g.sum(g.square(x), 1), value=1 / 256), value=1e-6))
    n = g.div(x, r)
    g.output(g.matmul(g.mul(gain, n) if weighted else n, w))
    return g


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "with its weight"])
def test_a_norm_before_a_projection_has_forms_that_loop_over_the_hidden_dim(weighted):
    """(g · x / r) @ W = ((x · g) @ W) / r: the loop accumulates x·g against W and the sum of squares, the norm
    divides once after it. The verifier proves it with the quotient moved out of the product (axiom mul-div)."""
    assert _loop_forms(_norm_projection(weighted), contracted=1)


@pytest.mark.parametrize("n", [1, 8])
def test_a_residual_after_a_projection_has_forms_that_loop_over_the_contracted_dim(n):
    """r + X @ W: the loop accumulates X @ W, and r's tile (loaded once: the loop walks none of its dims) is
    added after it (prism.search.generator.epilogue_operand)."""
    g = prism.KernelGraph()
    x = g.input((n, 512), dtype="float16", name="X")
    w = g.input((512, 256), dtype="float16", name="W")
    r = g.input((n, 256), dtype="float16", name="R")
    g.output(g.add(r, g.matmul(x, w)))
    assert _loop_forms(g, contracted=1)


def test_only_whole_forms_pin_an_epilogue_operand():
    """A mask added to attention's logits is inside a later contraction: no pinning for it (it would widen
    attention's generation for forms no faster), while a residual on a projection's result gets it."""
    from prism.search.driver import from_graph
    from prism.search.generator import epilogue_operand
    from prism.symbolic.closure import closure
    from prism.symbolic.dims import AtomSpace

    def target(graph):
        (root,) = from_graph(graph)
        return closure(root, AtomSpace(tuple(t.shape for t in graph.inputs)))

    a = prism.KernelGraph()
    q, kt, mask, v = (a.input(s, dtype="float16", name=n) for s, n in
                      [((4, 1, 64), "Q"), ((4, 64, 32), "Kt"), ((4, 1, 32), "M"), ((4, 32, 64), "V")])
    logits = a.add(a.matmul(q, kt), mask)
    e = a.exp(a.sub(logits, a.max(logits, 2)))
    a.output(a.matmul(a.div(e, a.sum(e, 2)), v))
    b = prism.KernelGraph()
    x, w, r = b.input((2, 64), name="X"), b.input((64, 32), name="W"), b.input((2, 32), name="R")
    b.output(b.add(r, b.matmul(x, w)))
    assert not epilogue_operand(target(a)) and epilogue_operand(target(b))
