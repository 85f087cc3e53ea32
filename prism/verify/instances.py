"""Concrete instances of axiom patterns: every dim assignment, inferred shapes, random inputs, for testing.

A rule must hold for every value of its pattern variables that its side conditions allow, including
ones its author did not think of (two unconstrained parallel dims that are equal, a data dim that makes
a matmul contract the wrong axis). So instances are enumerated, not hand-picked: every data-dim
assignment, every way of making unconstrained parallel dims equal, inputs that are themselves families
or broadcast. Shapes are inferred by the typing rules (prism.verify.types), with extents as unknown base extents
times powers of the parallel sizes, so that a side which is well formed only when some size is 1 is
not mistaken for a generic one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Callable, Iterator, Mapping

import torch

from prism.errors import IllFormedTerm
from prism.verify import expr
from prism.verify.axioms import Rule
from prism.verify.expr import TERMS, Sym, Term, Var, bcast, part, repl, subterms
from prism.verify.types import Extent, Extents, TermType, input_type, step

__all__ = ["Binding", "Shapes", "bindings", "families", "ground", "infer_shapes", "wrappers", "random_env",
           "with_shapes"]

Binding = dict[str, object]  # pattern-variable name -> data dim, parallel dim name or constant


def bindings(rule: Rule, rank: int = 3, consts: tuple[float, ...] = (0.75, -1.5)) -> Iterator[Binding]:
    """Every assignment of the rule's dim, parallel-dim and constant variables its conditions allow.

    Parallel dims range over set partitions (named P0, P1, ...), so unconstrained ones are tried equal.
    """
    syms: dict[str, Sym] = {}
    for side in (rule.lhs, rule.rhs):
        for n in subterms(side):
            for a in n.attrs:
                if isinstance(a, Sym):
                    syms[a.name] = a
    dims = [s for s in syms.values() if s.kind == "dim"]
    pds = [s for s in syms.values() if s.kind == "pdim"]
    cs = [s for s in syms.values() if s.kind == "const"]
    for dv in itertools.product(range(rank), repeat=len(dims)):
        for blocks in _set_partitions(len(pds)):
            for cv in itertools.product(consts, repeat=len(cs)):
                b: Binding = {s.name: x for s, x in zip(dims, dv)}
                b.update({s.name: f"P{blk}" for s, blk in zip(pds, blocks)})
                b.update({s.name: x for s, x in zip(cs, cv)})
                if all(_holds(c, b) for c in rule.when):
                    yield b


def _set_partitions(n: int) -> Iterator[tuple[int, ...]]:
    """Restricted growth strings: each is one way of grouping n items into blocks."""
    def go(prefix: tuple[int, ...], top: int) -> Iterator[tuple[int, ...]]:
        if len(prefix) == n:
            yield prefix
            return
        for i in range(top + 2):
            yield from go(prefix + (i,), max(top, i))
    yield from go((), -1)


def _holds(cond: tuple, b: Binding) -> bool:
    op, x, y = cond
    xv = b[x.name] if isinstance(x, Sym) else x
    yv = b[y.name] if isinstance(y, Sym) else y
    return xv != yv if op == "!=" else xv >= yv


def ground(pattern: Term, b: Binding, leaf: Callable[[str], Term]) -> Term:
    """Substitute a binding into a pattern; tensor variable ?t becomes leaf("t")."""
    memo: dict[Term, Term] = {}
    for n in subterms(pattern):
        if n.op == "var":
            name = n.attrs[0]
            memo[n] = leaf(name[1:]) if name.startswith("?") else n
            continue
        attrs = tuple(b[x.name] if isinstance(x, Sym) else x for x in n.attrs)
        memo[n] = Term(n.op, tuple(memo[x] for x in n.args), attrs)  # keep operand order as written
    return memo[pattern]


def families(term: Term) -> dict[str, list[str]] | None:
    """The parallel dims each input must already carry for `term` to be well formed (None: impossible).

    Membership of a parallel dim p is decided per p: part/repl over p need p absent below them, comb/red
    need it present, operands of one op need the same families. Inputs left unconstrained get none.
    """
    out: dict[str, list[str]] = {}
    pds = sorted({a for n in subterms(term) for kind, a in zip(TERMS[n.op].attrs, n.attrs) if kind == "pdim"})
    for pd in pds:
        parent: dict[object, object] = {}

        def find(x: object) -> object:
            while parent.get(x, x) != x:
                x = parent[x]
            return x

        def union(x: object, y: object) -> bool:
            rx, ry = find(x), find(y)
            if {rx, ry} == {True, False}:
                return False
            if rx != ry:
                if isinstance(rx, bool):
                    rx, ry = ry, rx
                parent[rx] = ry
            return True

        member: dict[Term, object] = {}
        for n in subterms(term):
            kids = [member[x] for x in n.args]
            if n.op == "var":
                member[n] = ("var", n.attrs[0])
            elif n.op in expr.PARALLEL and n.attrs[-1] == pd:
                adds = n.op in ("part", "repl")
                if not union(kids[0], not adds):
                    return None
                member[n] = adds
            else:
                for kid in kids[1:]:
                    if not union(kids[0], kid):
                        return None
                member[n] = kids[0]
        for n in subterms(term):
            if n.op == "var" and find(("var", n.attrs[0])) is True:
                out.setdefault(n.attrs[0], []).append(pd)
    return out


def wrappers(term: Term, rank: int = 3) -> Iterator[tuple[str, Callable[[str], Term]]]:
    """Ways to stand concrete inputs in for the tensor variables of a ground term with Var leaves.

    Each input gets the families it needs (see `families`), made by repl or by part along one dim; then
    all inputs are optionally put in an extra family W, or one of them is broadcast along one dim.
    """
    fams = families(term)
    if fams is None:
        return
    names = sorted({n.attrs[0] for n in subterms(term) if n.op == "var"})
    modes = ["repl"] + [f"part{j}" for j in range(rank)] if fams else ["none"]

    def base(mode: str) -> Callable[[str], Term]:
        def leaf(n: str) -> Term:
            x = Var(n)
            for pd in fams.get(n, ()):
                x = repl(x, pd) if mode == "repl" else part(x, int(mode[4:]), pd)
            return x
        return leaf

    for mode in modes:
        leaf = base(mode)
        yield mode, leaf
        yield f"{mode}+part-W", lambda n, leaf=leaf: part(leaf(n), 1, "W")
    leaf = base(modes[-1])
    for name in names:
        for dd in range(rank):
            yield f"bcast-{name}-{dd}", (lambda n, name=name, dd=dd: bcast(leaf(n), dd) if n == name else leaf(n))


class Shapes(Extents):
    """Input shapes that make a term well formed for all parallel sizes, as functions of the sizes.

    Each dim of an input of unknown shape is an unknown extent; the typing rules (prism.verify.types)
    unify unknowns where they call for equal extents, as union-find with monomial weights.
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.parent: dict[str, Extent] = {}  # unknown -> what it equals (another unknown, or 1, times sizes)
        self.inputs: dict[str, tuple[Extent, ...]] = {}
        self.used: list[Extent] = []
        self.frozen = False  # True: every equality must already hold (typing a rewrite's other side)

    def type_of(self, term: Term) -> TermType:
        """Type `term`, giving inputs of unknown shape `rank` unknown dims (IllFormedTerm if impossible)."""
        memo: dict[Term, TermType] = {}
        for n in subterms(term):
            if n.op == "var":
                name, shape = n.attrs
                if name not in self.inputs:
                    self.inputs[name] = input_type(shape).extents if shape else tuple(
                        self.fresh() for _ in range(self.rank))
                memo[n] = TermType(self.inputs[name])
            else:
                memo[n] = step(TERMS[n.op].rule, n.op, n.attrs, [memo[x] for x in n.args], self, what=n.op)
            self.used.extend(memo[n].extents)
        t = memo[term]
        return TermType(tuple(map(self.resolve, t.extents)), t.bcast, t.live)

    def fresh(self) -> Extent:
        u = f"u{len(self.parent)}"
        self.parent[u] = Extent(u)
        return Extent(u)

    def resolve(self, e: Extent) -> Extent:
        if isinstance(e.coef, int) or self.parent[e.coef].coef == e.coef:
            return e
        root = self.resolve(self.parent[e.coef])
        self.parent[e.coef] = root
        return root.times(e.mono)

    def unify(self, x: Extent, y: Extent, why: str) -> None:
        rx, ry = self.resolve(x), self.resolve(y)
        if rx.coef == ry.coef:
            if rx.mono != ry.mono:
                raise IllFormedTerm(f"{why}: extents {rx} and {ry} are equal only when some parallel size is 1")
        elif self.frozen:
            raise IllFormedTerm(f"{why}: {rx} vs {ry} are equal only for some input shapes")
        elif isinstance(rx.coef, str):  # u * mx = ry, so u = ry / mx
            self.parent[rx.coef] = ry.times(rx.mono, -1)
        elif isinstance(ry.coef, str):
            self.parent[ry.coef] = rx.times(ry.mono, -1)
        else:
            raise IllFormedTerm(f"{why}: {rx} vs {ry}")

    def extents(self, sizes: Mapping[str, int], salt: int = 0) -> dict[str, tuple[int, ...]]:
        """Concrete input shapes (first axis first) for these parallel sizes.

        Unrelated extents get different base numbers (rotated by `salt`, so that a coincidence at one
        call is not repeated at the next), lest two extents agree by accident and hide a bad rule.
        """
        need: dict[int | str, Counter] = {}
        for x in self.used:
            r = self.resolve(x)
            for pd, ex in r.mono:
                if ex < 0:
                    need.setdefault(r.coef, Counter())[pd] = max(need.get(r.coef, Counter())[pd], -ex)
        if need.get(1):
            raise IllFormedTerm("an extent of 1 would be split")
        base: dict[int | str, int] = {}
        for u in self.parent:
            r = self.resolve(Extent(u)).coef
            if r not in base:
                value = r if isinstance(r, int) else 2 + (len(base) + salt) % 9
                for pd, ex in need.get(r, {}).items():
                    value *= sizes[pd] ** ex
                base[r] = value

        def val(x: Extent) -> int:
            r = self.resolve(x)
            out = float(base.get(r.coef, r.coef))
            for pd, ex in r.mono:
                out *= sizes[pd] ** ex
            assert out == int(out)
            return int(out)
        return {n: tuple(val(x) for x in reversed(es)) for n, es in self.inputs.items()}


def infer_shapes(term: Term, rank: int = 3) -> Shapes:
    """Shapes of the inputs of a ground term that make it well formed for all sizes (inputs of unknown
    shape get `rank` dims); IllFormedTerm if there are none."""
    sh = Shapes(rank)
    sh.type_of(term)
    return sh


def random_env(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Random float64 inputs of mixed sign (so relu and sqrt are exercised on both sides of zero)."""
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g, dtype=torch.float64) + 0.5 for n, s in shapes.items()}



def with_shapes(term: Term, shapes: Mapping[str, tuple[int, ...]]) -> Term:
    """`term` with each input Var given its shape from `shapes` (so the term is typed and checkable)."""
    memo: dict[Term, Term] = {}
    for n in subterms(term):
        if n.op == "var":
            memo[n] = Var(n.attrs[0], shapes[n.attrs[0]])
        else:
            memo[n] = Term(n.op, tuple(memo[x] for x in n.args), n.attrs)
    return memo[term]
