"""Split-KV attention forms that compute the program only when their parallel sizes are related (classes
A-D), built by hand at small sizes: what proofs under size constraints (prism.verify.size_constraints) are tested
on (tests/verify/test_size_constraints.py) and what the soundness fuzz mutates (benchmarks/fuzz_soundness.py
--constrained).

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
Each builder also makes a mutant (`mutant=True`) that is wrong at the constrained sizes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from prism.ir import BlockGraph, KernelGraph
from prism.ir.sizes import Constraint, Extent

__all__ = ["CFG", "CLASSES", "S", "Form", "class_a", "class_b", "class_c", "class_d", "size"]


def size(name: str) -> Extent:
    """The extent of one parallel size (`y0`, `i1`)."""
    return Extent(1, ((name, 1),))


CFG = {"b": 2, "g": 4, "h": 32, "d": 8}
S = 4
"""B's group size: kernel 1 folds each exp tile into S columns."""


def kernel1(g: KernelGraph, cfg: dict, splits: int, loop: int, fold: str = "") -> tuple:
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
    num, den = kernel1(g, cfg, splits, loop)
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
    num, den = kernel1(g, cfg, splits, loop, fold="group_max" if mutant else "group_sum")
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
    num, den = kernel1(g, cfg, splits, loop)
    k2 = BlockGraph(grid=(cfg["b"], splits2), loop=1)
    t = k2.accum(k2.input(den, imap={"x": 0, "y": 2}))                     # [1, g, y0/y1]
    k2.output((k2.max if mutant else k2.sum)(t, 2), omap={"x": 0})         # blocks along y add up
    (ds,) = g.custom(k2, [den])
    g.output(g.div(g.group_sum(num, 2, cfg["d"]), ds))
    return g


def class_d(cfg: dict, splits: int, loop: int, loop2: int, mutant: bool = False) -> KernelGraph:
    """Mutant: the denominators' accumulator takes their max (accum_max), not their sum."""
    g = KernelGraph()
    num, den = kernel1(g, cfg, splits, loop)
    k2 = BlockGraph(grid=(cfg["b"],), loop=loop2)
    ns = k2.accum(k2.input(num, imap={"x": 0}, fmap=2))                   # [1, g, d·y0/i1]
    ds = k2.accum(k2.sum(k2.input(den, imap={"x": 0}, fmap=2), 2), "accum_max" if mutant else "accum")
    k2.output(k2.div(ns, ds), omap={"x": 0})
    (o,) = g.custom(k2, [num, den])
    g.output(o)
    return g


class Form(NamedTuple):
    """A class: its builder (config, parallel sizes..., mutant=False), the sizes it is proved at, the
    constraints it needs, and the sizes a sweep tries per argument."""

    build: Callable[..., KernelGraph]
    at: tuple[int, ...]
    constraints: tuple[Constraint, ...]
    sweep: list[tuple[int, ...]]


CLASSES = {
    "A": Form(class_a, (4, 2, 2), (Constraint.divides(size("i1"), size("y0")),),
              [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
    "B": Form(class_b, (2, 2), (Constraint.divides(size("i0").times(size("y0").mono), Extent(CFG["h"] // S)),),
          [(1, 2, 4, 8, 16), (1, 2, 4, 8)]),
    "C": Form(class_c, (4, 2, 2), (Constraint.divides(size("y1"), size("y0")),),
              [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
    "D": Form(class_d, (4, 2, 4), (Constraint.equal(size("i1"), size("y0")),),
              [(1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8)]),
}
