"""Proofs under size constraints: what a graph that is a valid µGraph only for some parallel sizes needs of
them, and how a proof assumes it.

Some graphs compute their program only when their sizes are related: a second kernel whose loop walks the
first kernel's partials one split at a time (its loop range = the split count), or a whole number of
splits at a time (the range divides the split count); a group op over a tile that holds whole groups only
when the tile is a multiple of the group size. Their terms are ill formed for all sizes (prism.verify.types
refuses a split of extent y0 by i1, a group op over groups no parallel dim made, an output whose extent
depends on sizes); each refusal says what the sizes would have to satisfy (a `Need`). `options` turns a
need into `Assumption`s, each with the `Constraint` (prism.ir.sizes) it stands for:

  Factor(r, (q, f))   r = q·f for a fresh parallel dim f       constraint q | r
  Factor(r, (q,))     r = q                                    constraint q = r
  Count(e, s, g)      a group op of size s over extent e has g groups, g fresh   constraint s | e

and the encoder writes the graph under them (prism.verify.encode, `Assumed`): every part, comb, red, redmax
and repl over r becomes the same op over q then f (q outer), and the group op becomes part by g then red
over g. Then the e-graph proves the terms equal to the program for all values of the remaining and the
fresh parallel dims, as for any graph.

Soundness. Take sizes s that satisfy the constraints (and split the dims evenly, as every proof assumes);
let s' give each remaining dim its size in s, each fresh f of Factor(r, (q, f)) the whole number s[r]/s[q],
and each fresh g of Count(e, s, g) the whole number e(s)/s. Each kernel's terms under the assumptions mean,
at s', what that kernel computes at s:
  - Factor(r, (q, f)): splitting a dim into s[r] = s[q]·s'[f] chunks is splitting it into s[q] chunks and
    each of those into s'[f] (member k = a·s'[f] + b is chunk b of chunk a); concatenating members in that
    order is comb over f then over q; a sum or max over the members is one over both; copies are copies.
    With one part, the dim is r's family named q (of the same size; a term in which q and r would both be
    live is ill formed and refused).
  - Count(e, s, g): at s the group op's operand has e(s) = s·s'[g] elements along its dim, so part by g
    (chunk b = group b) and a sum (max) over the members is the op itself. Where e names a fresh f of a
    Factor(r, (q, f)), the constraint is stated over e with f written r/q (`Assumed.in_sizes`): at s',
    s'[f] = s[r]/s[q], so that is e's value, and s | it is what makes s'[g] a size. A Count over an extent
    naming another fresh dim (a group count) is not offered.
Kernels meet only through whole tensors (no live parallel dim crosses a kernel's edge), so the graph's
terms at s' are its outputs at s. The terms are well formed for all sizes (typing checked them), so at s';
the proof gives them equal to the program's terms at s' (the axioms hold at every size where the terms are
well formed), and the program has no parallel dims. So the graph computes its program at every such s.
The constraint must be stated exactly: Factor's q | r is what makes s'[f] a size, Count's s | e what makes
s'[g] one; tests check each accepted graph numerically at sizes that satisfy its constraints, and that the
graphs are wrong or ill formed at sizes that break them (tests/verify/test_size_constraints.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from prism.ir.sizes import Constraint, Extent, kernel_of

__all__ = ["Assumed", "Assumption", "Cancel", "Count", "Divisible", "Factor", "Need", "Whole", "options"]


@dataclass(frozen=True)
class Divisible:
    """Parallel dim `by` splits `extent`, which is 1 for some sizes (a dim of one partial per split)."""

    extent: Extent
    by: str


@dataclass(frozen=True)
class Whole:
    """A group op of `size` over `extent`, whose groups no parallel dim made one by one."""

    extent: Extent
    size: int


@dataclass(frozen=True)
class Cancel:
    """`ratio` must be 1: two extents that are equal for some sizes only, or an output's extent over its
    program's."""

    ratio: Extent


Need = Union[Divisible, Whole, Cancel]


@dataclass(frozen=True)
class Factor:
    """Parallel dim `size` is the product of `parts` (outer first); a part that is no size of the graph is a
    fresh parallel dim."""

    size: str
    parts: tuple[str, ...]

    def constraint(self) -> Constraint:
        q = Extent(1, ((self.parts[0], 1),))
        r = Extent(1, ((self.size, 1),))
        return Constraint.equal(q, r) if len(self.parts) == 1 else Constraint.divides(q, r)


@dataclass(frozen=True)
class Count:
    """A group op of `size` over `extent` has `groups` groups, a fresh parallel dim. `over`: `extent` in the
    graph's sizes, where it names a fresh dim of a Factor (`Assumed.in_sizes`; None: it names none)."""

    extent: Extent
    size: int
    groups: str
    over: Extent | None = None

    def constraint(self) -> Constraint:
        return Constraint.divides(Extent(self.size), self.extent if self.over is None else self.over)


Assumption = Union[Factor, Count]


@dataclass(frozen=True)
class Assumed:
    """The assumptions a graph is encoded under, in the order they were made (none: for all sizes)."""

    assumptions: tuple[Assumption, ...] = ()

    def plus(self, a: Assumption) -> Assumed:
        return Assumed(self.assumptions + (a,))

    def __len__(self) -> int:
        return len(self.assumptions)

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """What the sizes must satisfy for a proof under these assumptions to hold (prism.ir.sizes)."""
        return tuple(dict.fromkeys(a.constraint() for a in self.assumptions))

    @property
    def fresh(self) -> frozenset[str]:
        """The parallel dims the assumptions made up, which no size of the graph is."""
        return frozenset([p for a in self.assumptions if isinstance(a, Factor) for p in a.parts[1:]]
                         + [a.groups for a in self.assumptions if isinstance(a, Count)])

    def factors(self, p: str) -> tuple[str, ...]:
        """The parallel dims p is written with (outer first): p itself unless a Factor rewrote it."""
        for a in self.assumptions:
            if isinstance(a, Factor) and a.size == p:
                return tuple(q for part in a.parts for q in self.factors(part))
        return (p,)

    def outer_first(self, pdims: list[str]) -> list[str]:
        """`pdims` with the factors of one size in its order, outer first (the order comb concatenated them
        in, and so the order in which part takes them apart: prism.verify.encode's group forms)."""
        place = {q: i for a in self.assumptions if isinstance(a, Factor) for i, q in enumerate(self.factors(a.size))}
        return sorted(pdims, key=lambda p: place.get(p, 0))

    def in_sizes(self, extent: Extent) -> Extent | None:
        """`extent` in the graph's sizes: each fresh dim f of a Factor(r, (q, f)) written as r/q (r itself
        rewritten if a Factor made it); None if it names a fresh dim no size stands for (a group count)."""
        out = extent
        for _ in range(len(self.assumptions)):
            for a in self.assumptions:
                k = dict(out.mono).get(a.parts[-1], 0) if isinstance(a, Factor) and len(a.parts) == 2 else 0
                if k:
                    out = out.times(((a.parts[1], k),), -1).times(((a.size, k), (a.parts[0], -k)))
        return None if any(p in self.fresh for p, _ in out.mono) else out

    def groups(self, extent: Extent, size: int) -> str | None:
        """The fresh group count a Count gave a group op of `size` over `extent`, if any."""
        return next((a.groups for a in self.assumptions if isinstance(a, Count)
                     and (a.extent, a.size) == (extent, size)), None)


def options(need: Need, assumed: Assumed) -> list[Assumption]:
    """The assumptions that could meet `need`, weakest constraint first; each relates sizes of the graph only
    (never a fresh dim: the constraint must be one a launch can check)."""
    def sizes(mono: tuple[tuple[str, int], ...]) -> list[str]:
        return [p for p, k in mono if k == 1 and p not in assumed.fresh]

    if isinstance(need, Divisible):
        if need.by in assumed.fresh:
            return []
        return [Factor(r, parts) for r in sizes(need.extent.ups) if _apart(r, need.by)
                for parts in ((need.by, f"{r}_per_{need.by}"), (need.by,))]
    e = need.ratio if isinstance(need, Cancel) else need.extent
    pairs = [(r, q) for r in sizes(e.ups) for q in sizes(e.downs) if _apart(r, q)]
    if isinstance(need, Cancel):
        return [Factor(r, (q,)) for r, q in pairs]
    over = None if assumed.groups(need.extent, need.size) else assumed.in_sizes(need.extent)
    counted = [] if over is None else [Count(need.extent, need.size,
                                             f"groups{sum(isinstance(a, Count) for a in assumed.assumptions)}",
                                             None if over == need.extent else over)]
    return [Factor(r, (q, f"{r}_per_{q}")) for r, q in pairs] + counted


def _apart(r: str, q: str) -> bool:
    """Sizes of two different kernels: within one kernel every value lives over all its parallel dims, so
    relating two of them leaves a term over both ill formed anyway."""
    return kernel_of(r)[1] != kernel_of(q)[1]
