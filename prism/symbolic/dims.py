"""Symbolic tile dimensions D/σ(T,d), mapping variables m[T,d,p], and dimension matching by union-find.

The paper (§2) gives every data dim d of a block-graph input T the tile extent D/σ(T,d) with
σ(T,d) = ∏_p (m[T,d,p]·d_p + 1 − m[T,d,p]) over the parallel dims p (grid dims and the loop).
Two tile dims match for all sizes d_p exactly when their full extents D agree and their mapping
variables agree coefficient by coefficient: m[T1,d1,p] = m[T2,d2,p] for every p (§3.2). Those
equalities are an equivalence relation on *atoms* (an input tensor's data dim), so Prism keeps them
solved, as a union-find whose classes are the atoms that must be partitioned identically. A dim of
extent 1 that no op can ever partition (a `sum` result, a size-1 input dim) is the structural UNIT.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

__all__ = ["UNIT", "AtomSpace", "InvExtent", "MVar", "TileDim", "UnionFind", "match_dims"]

UNIT = -1
"""A dim of extent 1 for every parallel size: never partitioned, broadcasts against anything."""


@dataclass(frozen=True)
class AtomSpace:
    """The atoms of a program: one per (input tensor, data dim), numbered input by input."""

    shapes: tuple[tuple[int, ...], ...]

    @cached_property
    def atoms(self) -> tuple[tuple[int, int], ...]:
        """(input index, data dim) for every atom id, in id order (made once: the generator asks for an atom's
        owner and extent at every dim match)."""
        return tuple((i, d) for i, s in enumerate(self.shapes) for d in range(len(s)))

    def offset(self, index: int) -> int:
        return sum(len(s) for s in self.shapes[:index])

    def atom(self, index: int, dim: int) -> int:
        """The atom id of dim `dim` of input `index`, or UNIT when that dim has extent 1."""
        return UNIT if self.shapes[index][dim] == 1 else self.offset(index) + dim

    def input_dims(self, index: int) -> tuple[int, ...]:
        """The loader shape of input `index` in atoms (UNIT for size-1 dims)."""
        return tuple(self.atom(index, d) for d in range(len(self.shapes[index])))

    def extent(self, atom: int) -> int:
        if atom == UNIT:
            return 1
        index, dim = self.atoms[atom]
        return self.shapes[index][dim]

    def owner(self, atom: int) -> tuple[int, int]:
        """(input index, data dim) of an atom."""
        return self.atoms[atom]

    def __len__(self) -> int:
        return sum(len(s) for s in self.shapes)


@dataclass(frozen=True)
class InvExtent:
    """The scalar 1/D where D is the full extent of data dim `dim` of input `index` (rms_norm's 1/N).

    Kept symbolic so that a saved search result re-instantiates at other sizes with the right value.
    """

    index: int
    dim: int

    def value(self, shapes: Sequence[Sequence[int]]) -> float:
        return 1.0 / shapes[self.index][self.dim]

    def __repr__(self) -> str:
        return f"1/|in{self.index}.{self.dim}|"


@dataclass(frozen=True)
class UnionFind:
    """An immutable union-find over atom ids; the representative of a class is its smallest atom."""

    parent: tuple[int, ...]

    @classmethod
    def identity(cls, n: int) -> UnionFind:
        return cls(tuple(range(n)))

    def find(self, a: int) -> int:
        if a == UNIT:
            return UNIT
        while self.parent[a] != a:
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> UnionFind:
        """A new union-find with the classes of `a` and `b` merged (self when already one class)."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return self
        lo, hi = min(ra, rb), max(ra, rb)
        parent = list(self.parent)
        parent[hi] = lo
        return UnionFind(tuple(parent))

    def classes(self, atoms: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
        """Representative -> sorted members, over `atoms` (default: all)."""
        out: dict[int, list[int]] = {}
        for a in range(len(self.parent)) if atoms is None else atoms:
            out.setdefault(self.find(a), []).append(a)
        return {r: tuple(sorted(m)) for r, m in sorted(out.items())}


# ---- the paper's framing: σ(T,d) and coefficient matching ----------------------------------------


@dataclass(frozen=True)
class MVar:
    """The Boolean mapping variable m[T,d,p]: data dim `dim` of tensor `tensor` is split along `p`."""

    tensor: str
    dim: int
    p: str

    def __repr__(self) -> str:
        return f"m[{self.tensor},{self.dim},{self.p}]"


@dataclass(frozen=True)
class TileDim:
    """The symbolic tile extent D/σ(T,d), σ = ∏_p (m[T,d,p]·d_p + 1 − m[T,d,p]) over `parallel`."""

    extent: int
    tensor: str
    dim: int
    parallel: tuple[str, ...]

    def coefficients(self) -> dict[str, MVar]:
        """The mapping variable that is the coefficient of each d_p in σ."""
        return {p: MVar(self.tensor, self.dim, p) for p in self.parallel}

    def evaluate(self, m: dict[MVar, int], sizes: dict[str, int]) -> float:
        sigma = 1
        for p, var in self.coefficients().items():
            sigma *= sizes[p] if m.get(var, 0) else 1
        return self.extent / sigma

    def __repr__(self) -> str:
        return f"{self.extent}/σ({self.tensor},{self.dim})"


def match_dims(a: TileDim, b: TileDim) -> list[tuple[MVar, MVar]] | None:
    """Coefficient matching: the equalities that make a ≡ b for all d_p, or None if no m can.

    a and b are identical functions of the sizes iff D_a = D_b and σ_a, σ_b have the same
    coefficient for every d_p; Prism's union-find stores exactly these equalities.
    """
    if a.extent != b.extent or a.parallel != b.parallel:
        return None
    ca, cb = a.coefficients(), b.coefficients()
    return [(ca[p], cb[p]) for p in a.parallel]
