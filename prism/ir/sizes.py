"""A kernel graph's parallel sizes by name, and the constraints among them that its proof may need.

Custom op k of a kernel graph (numbered from 0 in the graph's topological order) has one parallel size per
grid dim, named x{k}, y{k}, z{k}, and its loop range, i{k}: the names verification writes its terms with
(prism.verify.encode). Most graphs are proved equal to their program for all sizes; some only for sizes
that satisfy a few relations (prism.verify.size_constraints derives them): `Constraint`s, each `lhs = rhs` or
`lhs | rhs` (lhs divides rhs), both sides a positive integer times a product of named sizes. A graph
carries the constraints its proof needs (`KernelGraph.constraints`); whatever picks sizes (the tuner's
space, numeric tests) keeps to them, and a launch checks them (`check`): outside them the graph computes
something other than the program it was proved equal to.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from prism.errors import ConstraintError, SerializationError

__all__ = ["Constraint", "Extent", "Mono", "ONE", "RELATIONS", "describe", "grid_size_name",
           "kernel_of", "loop_size_name", "violations"]

Mono = tuple[tuple[str, int], ...]
"""A product of parallel sizes: (parallel dim, power) pairs, sorted, no zero powers."""


def _mono(powers: Mapping[str, int]) -> Mono:
    return tuple(sorted((p, k) for p, k in powers.items() if k))


@dataclass(frozen=True)
class Extent:
    """`coef` times the sizes in `mono`; `coef` is a known extent (int) or an unknown one (str, inference)."""

    coef: int | str
    mono: Mono = ()

    def times(self, mono: Mono, sign: int = 1) -> Extent:
        powers = Counter(dict(self.mono))
        for p, k in mono:
            powers[p] += sign * k
        return Extent(self.coef, _mono(powers))

    @property
    def ups(self) -> Mono:
        """The sizes with positive powers."""
        return tuple((p, k) for p, k in self.mono if k > 0)

    @property
    def downs(self) -> Mono:
        """The sizes with negative powers, as positive powers (the denominator)."""
        return tuple((p, -k) for p, k in self.mono if k < 0)

    def __str__(self) -> str:
        ups = [p if k == 1 else f"{p}^{k}" for p, k in self.ups]
        downs = [p if k == 1 else f"{p}^{k}" for p, k in self.downs]
        head = "·".join(([str(self.coef)] if self.coef != 1 or not ups else []) + ups)
        return head + (f"/{'·'.join(downs)}" if downs else "")


ONE = Extent(1)

_NAME = re.compile(r"([xyzi])(\d+)")
RELATIONS = {"=": "=", "|": "divides"}
"""Constraint relations and how they read."""


def grid_size_name(dim: str, kernel: int) -> str:
    """The name of custom op `kernel`'s grid size along `dim` ("x", "y", "z"; "i" names its loop range)."""
    return f"{dim}{kernel}"


def loop_size_name(kernel: int) -> str:
    """The name of custom op `kernel`'s loop range."""
    return grid_size_name("i", kernel)


def kernel_of(name: str) -> tuple[str, int]:
    """(grid dim "x"/"y"/"z" or "i" for the loop, kernel index) of a size name; ConstraintError otherwise."""
    m = _NAME.fullmatch(name)
    if m is None:
        raise ConstraintError(f"{name!r} names no parallel size (x0, y1, i0, ...: a grid dim or a loop, "
                              "and the custom op's index)")
    return m.group(1), int(m.group(2))


@dataclass(frozen=True)
class Constraint:
    """`lhs = rhs` or `lhs | rhs` (rel "=" or "|"), over named parallel sizes, in a normal form: both sides
    have positive integer coefficients with no common factor and positive powers of sizes, each size on
    one side at most, and an equation has its sides in sorted order. Build with `equal` and `divides`."""

    rel: str
    lhs: Extent
    rhs: Extent

    def __post_init__(self) -> None:
        if self.rel not in RELATIONS:
            raise ConstraintError(f"a constraint's relation is one of {sorted(RELATIONS)}, got {self.rel!r}")
        for side in (self.lhs, self.rhs):
            if not isinstance(side, Extent) or isinstance(side.coef, bool) or not isinstance(side.coef, int) \
                    or side.coef < 1 or any(k < 1 for _, k in side.mono):
                raise ConstraintError(f"a constraint's sides are positive integers times positive powers of "
                                      f"sizes, got {side!r}")
            for p, _ in side.mono:
                kernel_of(p)

    @classmethod
    def equal(cls, a: Extent, b: Extent) -> Constraint:
        """a = b, for sides of any powers."""
        lhs, rhs = _cross(a, b)
        return cls("=", *sorted((lhs, rhs), key=str))

    @classmethod
    def divides(cls, a: Extent, b: Extent) -> Constraint:
        """a | b (b / a is a whole number), for sides of any powers."""
        return cls("|", *_cross(a, b))

    @property
    def names(self) -> frozenset[str]:
        """The sizes it relates."""
        return frozenset(p for side in (self.lhs, self.rhs) for p, _ in side.mono)

    def holds(self, sizes: Mapping[str, int]) -> bool:
        """Whether it holds at these sizes (every size it names must be given)."""
        # both sides are whole numbers: positive integers times positive powers (the normal form)
        lhs, rhs = (side.coef * math.prod(sizes[p] ** k for p, k in side.mono) for side in (self.lhs, self.rhs))
        return lhs == rhs if self.rel == "=" else rhs % lhs == 0

    def renamed(self, kernels: Mapping[int, int]) -> Constraint:
        """The same relation with custom op k's sizes those of custom op kernels[k] (how a graph copied into
        another, where its kernels have other indices, keeps it)."""
        def side(e: Extent) -> Extent:
            return Extent(e.coef, _mono({grid_size_name(*_moved(p, kernels)): k for p, k in e.mono}))
        return Constraint(self.rel, side(self.lhs), side(self.rhs))

    def __str__(self) -> str:
        return f"{self.lhs} {RELATIONS[self.rel]} {self.rhs}"

    def to_json(self) -> list[Any]:
        """[rel, [lhs coef, {size: power}], [rhs coef, {size: power}]]."""
        return [self.rel, *([e.coef, dict(e.mono)] for e in (self.lhs, self.rhs))]

    @classmethod
    def from_json(cls, doc: Any, where: str = "constraint") -> Constraint:
        try:
            rel, (lc, lm), (rc, rm) = doc
            return cls(rel, Extent(lc, _mono(lm)), Extent(rc, _mono(rm)))
        except (TypeError, ValueError, AttributeError, ConstraintError) as e:
            raise SerializationError(f"{where}: not a size constraint ({e}): {doc!r}") from None


def _moved(name: str, kernels: Mapping[int, int]) -> tuple[str, int]:
    dim, k = kernel_of(name)
    return dim, kernels[k]


def _cross(a: Extent, b: Extent) -> tuple[Extent, Extent]:
    """(l, r) with l | r iff a | b and l = r iff a = b: b / a's denominator and numerator, as sides of
    positive powers with the coefficients' common factor taken out."""
    ratio = b.times(a.mono, -1)
    num, den = int(ratio.coef), int(a.coef)
    g = math.gcd(num, den)
    return Extent(den // g, ratio.downs), Extent(num // g, ratio.ups)


def violations(constraints: Iterable[Constraint], sizes: Mapping[str, int]) -> list[str]:
    """The constraints that do not hold at `sizes` (which give every size they name), in words."""
    out = []
    for c in constraints:
        at = {p: sizes[p] for p in c.names}
        if not c.holds(at):
            values = ", ".join(f"{p}={n}" for p, n in sorted(at.items()))
            out.append(f"{c} does not hold at {values}")
    return out


def describe(names: Iterable[str]) -> str:
    """What each size name stands for, for a reader: "i1: custom op 1's loop range; y0: ..."."""
    def one(name: str) -> str:
        dim, k = kernel_of(name)
        return f"{name}: custom op {k}'s " + ("loop range" if dim == "i" else f"grid size along {dim}")
    return "; ".join(one(p) for p in sorted(names))
