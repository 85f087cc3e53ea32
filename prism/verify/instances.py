"""Concrete instances of axiom patterns: every dim assignment, inferred shapes, random inputs, for testing.

A rule must hold for every value of its pattern variables that its side conditions allow, including
ones its author did not think of (two unconstrained parallel dims that are equal, a data dim that makes
a matmul contract the wrong axis). So instances are enumerated, not hand-picked: every data-dim
assignment, every way of making unconstrained parallel dims equal, inputs that are themselves families
or broadcast. Shapes are inferred, with extents as unknown base extents times powers of the parallel
sizes, so that a side which is well formed only when some size is 1 is not mistaken for a generic one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import torch

from prism.verify.axioms import Rule
from prism.verify.expr import OPS, Sym, Term, Var, bcast, part, repl, subterms

__all__ = [
    "Binding", "NotGeneric", "Shapes", "bindings", "families", "ground", "infer_shapes", "wrappers", "random_env",
]

Binding = dict[str, object]  # pattern-variable name -> data dim, parallel dim name or constant
Mono = tuple[tuple[str, int], ...]  # product of parallel sizes with integer exponents, sorted
Ext = tuple[int, Mono]  # an extent: unknown base number `sym` times a monomial


class NotGeneric(Exception):
    """The term is well formed only for special sizes (some parallel size 1), or not at all."""


def _mono(m: Mapping[str, int]) -> Mono:
    return tuple(sorted((k, v) for k, v in m.items() if v))


def _times(x: Mono, y: Mono, sign: int = 1) -> Mono:
    out = Counter(dict(x))
    for kk, vv in y:
        out[kk] += sign * vv
    return _mono(out)


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
    pds = sorted({a for n in subterms(term) for kind, a in zip(OPS[n.op].attrs, n.attrs) if kind == "pdim"})
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
            elif n.op in ("part", "repl", "comb", "red") and n.attrs[-1] == pd:
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


@dataclass
class _SV:
    pdims: frozenset[str]
    exts: tuple[Ext, ...]  # data dims from the last axis: exts[0] is the last axis
    flags: frozenset[int]


class Shapes:
    """Input shapes that make a term well formed for all parallel sizes, as functions of the sizes."""

    ONE = 0

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.parent: dict[int, tuple[int, Mono]] = {self.ONE: (self.ONE, ())}
        self.inputs: dict[str, tuple[Ext, ...]] = {}
        self.used: list[Ext] = []

    def fresh(self) -> Ext:
        s = len(self.parent)
        self.parent[s] = (s, ())
        return (s, ())

    def find(self, s: int) -> tuple[int, Mono]:
        """(root, w) with s = root * w."""
        r, w = self.parent[s]
        if r == s:
            return s, w
        root, w2 = self.find(r)
        self.parent[s] = (root, _times(w, w2))
        return self.parent[s]

    def resolve(self, x: Ext) -> Ext:
        root, w = self.find(x[0])
        return root, _times(w, x[1])

    def unify(self, x: Ext, y: Ext) -> None:
        (rx, mx), (ry, my) = self.resolve(x), self.resolve(y)
        if rx == ry:
            if mx != my:
                raise NotGeneric("extents equal only when some parallel size is 1")
            return
        if rx == self.ONE:  # keep ONE a root: ry = ONE * mx / my
            self.parent[ry] = (rx, _times(mx, my, -1))
        else:  # rx = ry * my / mx
            self.parent[rx] = (ry, _times(my, mx, -1))

    def extents(self, sizes: Mapping[str, int], salt: int = 0) -> dict[str, tuple[int, ...]]:
        """Concrete input shapes (first axis first) for these parallel sizes.

        Unrelated extents get different base numbers (rotated by `salt`, so that a coincidence at one
        call is not repeated at the next), lest two extents agree by accident and hide a bad rule.
        """
        need: dict[int, Counter] = {}
        for x in self.used:
            r, m = self.resolve(x)
            for pd, ex in m:
                if ex < 0:
                    need.setdefault(r, Counter())[pd] = max(need.get(r, Counter())[pd], -ex)
        if need.get(self.ONE):
            raise NotGeneric("an extent of 1 would be split")
        base: dict[int, int] = {}
        for s in sorted(self.parent):
            r, _ = self.find(s)
            if r not in base:
                value = 1 if r == self.ONE else 2 + (len(base) + salt) % 9
                for pd, ex in need.get(r, {}).items():
                    value *= sizes[pd] ** ex
                base[r] = value

        def val(x: Ext) -> int:
            r, m = self.resolve(x)
            out = float(base[r])
            for pd, ex in m:
                out *= sizes[pd] ** ex
            assert out == int(out)
            return int(out)
        return {n: tuple(val(x) for x in reversed(es)) for n, es in self.inputs.items()}


def infer_shapes(term: Term, rank: int = 3) -> Shapes:
    """Shapes of the inputs of a ground term that make it well formed for all sizes; NotGeneric if none."""
    sh = Shapes(rank)
    memo: dict[Term, _SV] = {}
    for n in subterms(term):
        memo[n] = _infer(n, [memo[x] for x in n.args], sh)
        sh.used.extend(memo[n].exts)
    return sh


def _infer(t: Term, args: list[_SV], sh: Shapes) -> _SV:  # noqa: C901 - one case per op
    op = t.op
    if op == "var":
        name = t.attrs[0]
        if name not in sh.inputs:
            sh.inputs[name] = tuple(sh.fresh() for _ in range(sh.rank))
        return _SV(frozenset(), sh.inputs[name], frozenset())
    x = args[0] if args else None
    one: Ext = (Shapes.ONE, ())
    if op in ("part", "comb", "red", "repl"):
        pd = t.attrs[-1]
        has = pd in x.pdims
        if has != (op in ("comb", "red")):
            raise NotGeneric(f"{op} over {pd} with family {sorted(x.pdims)}")
        pdims = x.pdims - {pd} if has else x.pdims | {pd}
        exts = list(x.exts)
        if op in ("part", "comb") and t.attrs[0] not in x.flags:
            dd = _dim(t.attrs[0], exts)
            exts[dd] = (exts[dd][0], _times(exts[dd][1], ((pd, -1 if op == "part" else 1),)))
        return _SV(pdims, tuple(exts), x.flags)
    if op in ("sum", "bcast"):
        dd = _dim(t.attrs[0], x.exts)
        if dd in x.flags:
            raise NotGeneric(f"{op} over broadcast dim {dd}")
        exts = list(x.exts)
        if op == "sum":
            exts[dd] = one
            return _SV(x.pdims, tuple(exts), x.flags)
        sh.unify(exts[dd], one)
        return _SV(x.pdims, x.exts, x.flags | {dd})
    if OPS[op].arity == 1:  # element-wise
        return x
    y = args[1]
    if x.pdims != y.pdims or len(x.exts) != len(y.exts):
        raise NotGeneric("operands differ in family or rank")
    if op == "matmul":
        if len(x.exts) < 2:
            raise NotGeneric("matmul of rank < 2")
        if 0 in x.flags and 1 in y.flags:
            raise NotGeneric("matmul contracting two broadcast dims")
        if 0 not in x.flags and 1 not in y.flags:
            sh.unify(x.exts[0], y.exts[1])
        batch, bflags = _pointwise(sh, x.exts[2:], y.exts[2:], {f - 2 for f in x.flags if f >= 2},
                                   {f - 2 for f in y.flags if f >= 2})
        flags = {1} & x.flags | {0} & y.flags | {f + 2 for f in bflags}
        return _SV(x.pdims, (y.exts[0], x.exts[1]) + batch, frozenset(flags))
    exts, flags = _pointwise(sh, x.exts, y.exts, x.flags, y.flags)
    return _SV(x.pdims, exts, flags)


def _pointwise(sh: Shapes, xs: tuple[Ext, ...], ys: tuple[Ext, ...], fx: set | frozenset,
               fy: set | frozenset) -> tuple[tuple[Ext, ...], frozenset[int]]:
    """Element-wise extents: equal, or one side broadcast along the dim."""
    exts = []
    for dd, (ex, ey) in enumerate(zip(xs, ys)):
        if dd not in fx and dd not in fy:
            sh.unify(ex, ey)
        exts.append(ey if dd in fx and dd not in fy else ex)
    return tuple(exts), frozenset(set(fx) & set(fy))


def _dim(dd: object, exts: list[Ext] | tuple[Ext, ...]) -> int:
    if not isinstance(dd, int) or dd >= len(exts):
        raise NotGeneric(f"data dim {dd} out of range")
    return dd


def random_env(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Random float64 inputs of mixed sign (so relu and sqrt are exercised on both sides of zero)."""
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g, dtype=torch.float64) + 0.5 for n, s in shapes.items()}

