"""Fused kernels as the encoder writes them, paired with their programs; wrong ones, too.

Candidates are written as the encoder builds them: a loader of T is, for each grid dim in order x, y, z,
part(T, d, p) or repl(T, p), then outermost the loop dim i0; an accumulator is red(t, i0); a saver is,
for each grid dim, comb(t, d, p) or red(t, p) (blocks summed). Data dims count from the last axis:
0 = columns, 1 = rows, 2 = batch.
"""

from __future__ import annotations

from prism.verify.expr import (
    Term, Var, bcast, comb, div, exp, matmul, mul, part, red, repl, scale, shift, silu, sqrt, square, sum_,
)
from prism.verify.instances import random_env
from prism.verify.model import IllFormed, evaluate, same_value

__all__ = ["POSITIVE", "NEGATIVE", "SHAPES", "numeric_equal", "rms", "rmsnorm", "two_kernels", "X", "W"]

SHAPES = {
    "X": (8, 64), "W": (64, 48), "Wg": (64, 48), "Wu": (64, 48),
    "Q": (4, 6, 16), "K": (4, 16, 24), "V": (4, 24, 16), "A": (8, 12), "B": (12, 10), "C": (10, 18),
}
X, W, Wg, Wu, Q, K, V, A, B, C = (Var(n, SHAPES[n]) for n in ("X", "W", "Wg", "Wu", "Q", "K", "V", "A", "B", "C"))


def rms(x: Term, n: int, eps: float = 0.0) -> Term:
    """rms_norm's denominator as the encoder expands it: bcast(sqrt(sum(x^2)/N + eps)) over dim 0."""
    ms = scale(sum_(square(x), 0), 1 / n)
    return bcast(sqrt(shift(ms, eps) if eps else ms), 0)


def softmax_matmul(s: Term, v: Term) -> Term:
    e = exp(s)
    return matmul(div(e, bcast(sum_(e, 0), 0)), v)


# -------------------------------------------------------------- fused candidates

def fig_softmax_matmul() -> Term:
    """The paper's Fig. 2(b): grid x over X's rows; the loop over X's columns and W's rows; two
    accumulators (row sums of exp, exp @ W) divided after the loop; saved along rows."""
    xl = part(part(X, 1, "x0"), 0, "i0")
    wl = part(repl(W, "x0"), 1, "i0")
    e = exp(xl)
    return comb(div(red(matmul(e, wl), "i0"), bcast(red(sum_(e, 0), "i0"), 0)), 1, "x0")


def rmsnorm(n: int = 64, eps: float = 0.0) -> Term:
    """rms_norm(X) @ W: grid x over W's columns, loop over the hidden dim (X's columns, W's rows)."""
    xl = part(repl(X, "x0"), 0, "i0")
    wl = part(part(W, 0, "x0"), 1, "i0")
    ms = scale(red(sum_(square(xl), 0), "i0"), 1 / n)
    den = bcast(sqrt(shift(ms, eps) if eps else ms), 0)
    return comb(div(red(matmul(xl, wl), "i0"), den), 0, "x0")


def rmsnorm_mlp(n: int = 64) -> Term:
    """(rms_norm(X) @ Wup) * (rms_norm(X) @ Wgate) in one kernel."""
    xl = part(repl(X, "x0"), 0, "i0")
    den = bcast(sqrt(scale(red(sum_(square(xl), 0), "i0"), 1 / n)), 0)
    up = div(red(matmul(xl, part(part(Wu, 0, "x0"), 1, "i0")), "i0"), den)
    gate = div(red(matmul(xl, part(part(Wg, 0, "x0"), 1, "i0")), "i0"), den)
    return comb(mul(up, gate), 0, "x0")


def rmsnorm_rows() -> Term:
    """rms_norm(X) @ W with the grid over X's rows instead of W's columns."""
    xl = part(part(X, 1, "x0"), 0, "i0")
    wl = part(repl(W, "x0"), 1, "i0")
    den = bcast(sqrt(scale(red(sum_(square(xl), 0), "i0"), 1 / 64)), 0)
    return comb(div(red(matmul(xl, wl), "i0"), den), 1, "x0")


def swiglu_2d() -> Term:
    """SwiGLU on a 2-D grid: x over X's rows, y over the weights' columns, the loop over the hidden dim."""
    xl = part(repl(part(X, 1, "x0"), "y0"), 0, "i0")
    g = red(matmul(xl, part(part(repl(Wg, "x0"), 0, "y0"), 1, "i0")), "i0")
    u = red(matmul(xl, part(part(repl(Wu, "x0"), 0, "y0"), 1, "i0")), "i0")
    return comb(comb(mul(silu(g), u), 1, "x0"), 0, "y0")


def swiglu() -> Term:
    """silu(X @ Wg) * (X @ Wu): grid x over the output columns, loop over the hidden dim."""
    xl = part(repl(X, "x0"), 0, "i0")
    g = red(matmul(xl, part(part(Wg, 0, "x0"), 1, "i0")), "i0")
    u = red(matmul(xl, part(part(Wu, 0, "x0"), 1, "i0")), "i0")
    return comb(mul(silu(g), u), 0, "x0")


def attention_loop(q: Term = Q) -> Term:
    """softmax(Q @ K) @ V: grid x over the batch, the loop over the kv length (K's cols, V's rows)."""
    ql = repl(part(q, 2, "x0"), "i0")
    kl = part(part(K, 2, "x0"), 0, "i0")
    vl = part(part(V, 2, "x0"), 1, "i0")
    e = exp(matmul(ql, kl))
    return comb(div(red(matmul(e, vl), "i0"), bcast(red(sum_(e, 0), "i0"), 0)), 2, "x0")


def attention_split_kv() -> Term:
    """Flash-decoding style: grid x over the batch, grid y over the kv length, the loop over it too.
    Kernel 0 saves numerator and denominator summed across y blocks (red saver); a kernel-level div
    follows."""
    ql = repl(repl(part(Q, 2, "x0"), "y0"), "i0")
    kl = part(part(part(K, 2, "x0"), 0, "y0"), 0, "i0")
    vl = part(part(part(V, 2, "x0"), 1, "y0"), 1, "i0")
    e = exp(matmul(ql, kl))
    num = red(comb(red(matmul(e, vl), "i0"), 2, "x0"), "y0")
    den = red(comb(red(sum_(e, 0), "i0"), 2, "x0"), "y0")
    return div(num, bcast(den, 0))


def qk_attention(n: int = 16) -> Term:
    """softmax(rms_norm(Q) @ K) @ V in one kernel: the norm needs all of Q's columns, which each
    block has (the loop splits only the kv length)."""
    ql = repl(part(Q, 2, "x0"), "i0")
    qn = div(ql, bcast(sqrt(scale(sum_(square(ql), 0), 1 / n)), 0))
    kl = part(part(K, 2, "x0"), 0, "i0")
    vl = part(part(V, 2, "x0"), 1, "i0")
    e = exp(matmul(qn, kl))
    return comb(div(red(matmul(e, vl), "i0"), bcast(red(sum_(e, 0), "i0"), 0)), 2, "x0")


def paper_section6() -> Term:
    """§6: two matmuls, A's rows over x, C's columns over y, B replicated. (The paper writes C's
    loader as part(C, c, y); the loader also replicates it over x, as the encoder does.)"""
    return comb(comb(matmul(matmul(repl(part(A, 1, "x0"), "y0"), repl(repl(B, "x0"), "y0")),
                            part(repl(C, "x0"), 0, "y0")),
                     1, "x0"), 0, "y0")


def split_k_grid() -> Term:
    """X @ W with the contraction split over the grid (blocks summed by the saver) and the loop."""
    return red(red(matmul(part(part(X, 0, "x0"), 0, "i0"), part(part(W, 1, "x0"), 1, "i0")), "i0"), "x0")


def row_sums() -> Term:
    """sum(X, cols): grid x over rows, the loop over columns, a sum accumulator."""
    return comb(red(sum_(part(part(X, 1, "x0"), 0, "i0"), 0), "i0"), 1, "x0")


def two_kernels() -> Term:
    """Kernel 0 normalises X's rows (grid over rows, no loop); kernel 1 multiplies by W (grid over W's
    columns, the loop over the hidden dim) and loads kernel 0's output."""
    x0 = part(X, 1, "x0")
    norm = comb(div(x0, bcast(sqrt(scale(sum_(square(x0), 0), 1 / 64)), 0)), 1, "x0")
    return comb(red(matmul(part(repl(norm, "x1"), 0, "i1"), part(part(W, 0, "x1"), 1, "i1")), "i1"), 0, "x1")


def two_kernels_scale_first() -> Term:
    """Kernel 0 computes the rms of X's rows; kernel 1 loads it replicated, divides X's tiles by it in
    the loop (a bcast of a loaded [n, 1] tile) and accumulates the matmul."""
    x0 = part(X, 1, "x0")
    s = comb(sqrt(scale(sum_(square(x0), 0), 1 / 64)), 1, "x0")
    xl = part(repl(X, "x1"), 0, "i1")
    sl = repl(repl(s, "x1"), "i1")
    return comb(red(matmul(div(xl, bcast(sl, 0)), part(part(W, 0, "x1"), 1, "i1")), "i1"), 0, "x1")


SIZES = [{"x0": 2, "y0": 2, "i0": 4, "x1": 3, "i1": 2}, {"x0": 4, "y0": 3, "i0": 2, "x1": 2, "i1": 4}]

POSITIVE = {
    "fig-softmax-matmul": (fig_softmax_matmul(), softmax_matmul(X, W)),
    "rmsnorm": (rmsnorm(), matmul(div(X, rms(X, 64)), W)),
    "rmsnorm-eps": (rmsnorm(eps=1e-6), matmul(div(X, rms(X, 64, 1e-6)), W)),
    "rmsnorm-mlp": (rmsnorm_mlp(), mul(matmul(div(X, rms(X, 64)), Wu), matmul(div(X, rms(X, 64)), Wg))),
    "rmsnorm-grid-over-rows": (rmsnorm_rows(), matmul(div(X, rms(X, 64)), W)),
    "swiglu": (swiglu(), mul(silu(matmul(X, Wg)), matmul(X, Wu))),
    "swiglu-2d-grid": (swiglu_2d(), mul(silu(matmul(X, Wg)), matmul(X, Wu))),
    "attention-loop": (attention_loop(), softmax_matmul(matmul(Q, K), V)),
    "attention-split-kv": (attention_split_kv(), softmax_matmul(matmul(Q, K), V)),
    "qk-attention": (qk_attention(), softmax_matmul(matmul(div(Q, rms(Q, 16)), K), V)),
    "paper-section-6": (paper_section6(), matmul(matmul(A, B), C)),
    "split-k-grid": (split_k_grid(), matmul(X, W)),
    "row-sums": (row_sums(), sum_(X, 0)),
    "two-kernels": (two_kernels(), matmul(div(X, rms(X, 64)), W)),
    "two-kernels-scale-first": (two_kernels_scale_first(), matmul(div(X, rms(X, 64)), W)),
}


def _swap_div(t: Term) -> Term:
    (num, den) = t.args
    return Term("div", (den, num))


xl = part(repl(X, "x0"), 0, "i0")
NEGATIVE = {
    "rmsnorm-comb-wrong-dim": (Term("comb", rmsnorm().args, (1, "x0")), matmul(div(X, rms(X, 64)), W)),
    "rmsnorm-swapped-div": (comb(_swap_div(rmsnorm().args[0]), 0, "x0"), matmul(div(X, rms(X, 64)), W)),
    "rmsnorm-wrong-constant": (rmsnorm(n=32), matmul(div(X, rms(X, 64)), W)),
    "missing-red": (comb(matmul(xl, part(part(W, 0, "x0"), 1, "i0")), 0, "x0"), matmul(X, W)),
    "red-of-repl": (comb(red(matmul(repl(repl(X, "x0"), "i0"), repl(part(W, 0, "x0"), "i0")), "i0"), 0, "x0"),
                    matmul(X, W)),
    "softmax-sum-wrong-dim": (fig_softmax_matmul(), matmul(div(exp(X), bcast(sum_(exp(X), 1), 1)), W)),
    "silu-of-partial-sums": (comb(mul(red(silu(matmul(xl, part(part(Wg, 0, "x0"), 1, "i0"))), "i0"),
                                      red(matmul(xl, part(part(Wu, 0, "x0"), 1, "i0")), "i0")), 0, "x0"),
                             mul(silu(matmul(X, Wg)), matmul(X, Wu))),
    "attention-divide-before-block-sum": (
        red(comb(div(red(matmul(exp(matmul(repl(repl(part(Q, 2, "x0"), "y0"), "i0"),
                                           part(part(part(K, 2, "x0"), 0, "y0"), 0, "i0"))),
                                part(part(part(V, 2, "x0"), 1, "y0"), 1, "i0")), "i0"),
                     bcast(red(sum_(exp(matmul(repl(repl(part(Q, 2, "x0"), "y0"), "i0"),
                                               part(part(part(K, 2, "x0"), 0, "y0"), 0, "i0"))), 0), "i0"), 0)),
                 2, "x0"), "y0"),
        softmax_matmul(matmul(Q, K), V)),
    "row-sums-no-final-sum": (comb(red(part(part(X, 1, "x0"), 0, "i0"), "i0"), 1, "x0"), sum_(X, 0)),
}


def numeric_equal(cand: Term, ref: Term) -> bool:
    """Do the two sides agree at every test size? (ill-formed counts as disagreeing)"""
    env = random_env(SHAPES, seed=7)
    for sizes in SIZES:
        try:
            if not same_value(evaluate(cand, env, sizes), evaluate(ref, env, sizes)):
                return False
        except IllFormed:
            return False
    return True


