"""Types of verification terms: what a term is over, so that an ill-formed one is refused before any proof.

A term denotes a *family* of tensors: one member per combination of its live parallel dims, each member
with the same data dims. Its type is that set of live parallel dims, the extent of each data dim and which
data dims are broadcast. An extent (prism.ir.sizes.Extent) is a coefficient times a product of parallel
sizes with integer powers (`4096/x0`: dim 1 of a [8, 4096] input after `part(_, 0, x0)`), so a type holds
for all parallel sizes.

The rules, one per shape rule of the op families (`RULES`, keyed by prism.ir.ops.Shape) and one per kind of
structural term (`parallel`, `bcast`): `part`/`repl` over p need p
not live (one parallel dim splits at most one dim of a tensor), `comb`/`red` need it live; dims must
exist; `bcast` needs extent 1; operands of one op must be of one family and have equal extents except
where one is broadcast; a contraction needs equal extents. A dim of extent 1 cannot be split (it would be
well formed only when the size is 1). A refusal that some sizes would lift (extents equal for some sizes, a
split of an extent that is 1 for some) says what they must satisfy (`IllFormedTerm.need`): a proof under
size constraints starts there (prism.verify.size_constraints).

Axioms preserve types (their numeric test checks every instance), so a well-formed term's e-class holds
only well-formed terms of its type, and two terms of different types are never proved equal.

The same rules infer input shapes for test instances: `Extents` compares known extents; a subclass
(prism.verify.instances.Shapes) unifies unknown ones instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from prism.errors import IllFormedTerm
from prism.ir.ops import Shape
from prism.ir.sizes import ONE, Extent
from prism.verify.size_constraints import Cancel, Divisible

__all__ = ["Extent", "ONE", "TermType", "Extents", "Typing", "input_type", "step", "KNOWN", "RULES", "parallel",
           "bcast"]


@dataclass(frozen=True)
class TermType:
    """A term's family (live parallel dims), its data dims' extents (from the last axis) and which of
    them are broadcast (extent 1 standing for whatever the other operand has)."""

    extents: tuple[Extent, ...]
    bcast: frozenset[int] = frozenset()
    live: frozenset[str] = frozenset()

    @property
    def rank(self) -> int:
        return len(self.extents)

    def __str__(self) -> str:
        dims = ", ".join("*" if d in self.bcast else str(e) for d, e in reversed(list(enumerate(self.extents))))
        fam = f" over {{{', '.join(sorted(self.live))}}}" if self.live else ""
        return f"[{dims}]{fam}"


class Extents:
    """Extent arithmetic for known extents: two extents agree iff they are the same for all sizes."""

    def resolve(self, e: Extent) -> Extent:
        return e

    def unify(self, x: Extent, y: Extent, why: str) -> None:
        x, y = self.resolve(x), self.resolve(y)
        if x != y:
            some = x.coef == y.coef
            raise IllFormedTerm(f"{why}: {x} vs {y}{' (equal only for some parallel sizes)' if some else ''}",
                                Cancel(Extent(1, x.times(y.mono, -1).mono)) if some else None)

    def split(self, e: Extent, p: str, why: str) -> Extent:
        """e divided by the size of p; a known extent 1 cannot be split for every size."""
        out = self.resolve(e).times(((p, 1),), -1)
        if out.coef == 1 and any(k < 0 for _, k in out.mono):
            raise IllFormedTerm(f"{why}: splits extent {self.resolve(e)}, which is 1 for some sizes",
                                Divisible(self.resolve(e), p))
        return out


KNOWN = Extents()
"""The arithmetic of terms over inputs of known shape (every term the checker sees)."""


def input_type(shape: Sequence[int]) -> TermType:
    """The type of an input tensor of a known shape (first axis first)."""
    return TermType(tuple(Extent(n) for n in reversed(tuple(shape))))


def _dim(what: str, d: object, x: TermType) -> int:
    if not isinstance(d, int) or not 0 <= d < x.rank:
        raise IllFormedTerm(f"{what}: data dim {d} does not exist in a term of type {x}")
    return d


Typing = Callable[[str, tuple, Sequence[TermType], Extents, str], TermType]
"""A typing rule: (op, attrs, operand types, extent arithmetic, the term's name in messages) -> the term's type."""


def step(rule: Typing, op: str, attrs: tuple, args: Sequence[TermType], ext: Extents = KNOWN,
         what: str = "") -> TermType:
    """The type of `op(args..., attrs...)` given its operands' types, or IllFormedTerm saying why not.

    `rule` is the term op's typing rule (prism.verify.expr.TERMS[op].rule: for a table op, RULES of its
    family's shape rule); `what` names the term in messages.
    """
    return rule(op, attrs, args, ext, what or op)


def parallel(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """part/repl over p add p to the family, comb/red/redmax remove it; part/comb split or stretch dim d."""
    x = args[0]
    p = attrs[-1]
    adds = op in ("part", "repl")
    if adds == (p in x.live):
        state = "already indexes the family" if adds else "is not live"
        raise IllFormedTerm(f"{what}: parallel dim {p} {state} (type {x}); a parallel dim splits at most "
                            "one dim of a tensor and is combined or reduced once")
    exts = list(x.extents)
    if op in ("part", "comb"):
        d = _dim(what, attrs[0], x)
        if d not in x.bcast:  # a broadcast dim has no extent to split or stretch
            exts[d] = ext.split(exts[d], p, what) if op == "part" else ext.resolve(exts[d]).times(((p, 1),))
    return TermType(tuple(exts), x.bcast, x.live | {p} if adds else x.live - {p})


def _known_dim(what: str, attrs: tuple, x: TermType) -> int:
    d = _dim(what, attrs[0], x)
    if d in x.bcast:
        raise IllFormedTerm(f"{what}: dim {d} of {x} is broadcast, its extent unknown")
    return d


def _reduce(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """A sum over dim d leaves extent 1 there."""
    x = args[0]
    d = _known_dim(what, attrs, x)
    return TermType(x.extents[:d] + (ONE,) + x.extents[d + 1:], x.bcast, x.live)


def bcast(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """Only a dim of extent 1 broadcasts; broadcasting a dim that already is changes nothing (a value that
    stretches along d, stretched along d again, is that value)."""
    x = args[0]
    d = _dim(what, attrs[0], x)
    if d in x.bcast:
        return x
    ext.unify(x.extents[d], ONE, f"{what}: only a dim of extent 1 broadcasts, dim {d} of {x} has")
    return TermType(x.extents, x.bcast | {d}, x.live)


def _same(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """Element-wise with one operand: its type."""
    return args[0]


def _family(what: str, x: TermType, y: TermType) -> None:
    if x.live != y.live:
        raise IllFormedTerm(f"{what}: operands of different families: {x} and {y}")
    if x.rank != y.rank:
        raise IllFormedTerm(f"{what}: operands of ranks {x.rank} and {y.rank}: {x} and {y}")


def _broadcast(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """Element-wise with two operands of one family: equal extents, or one side broadcast."""
    x, y = args
    _family(what, x, y)
    exts, flags = _pointwise(what, x.extents, y.extents, x.bcast, y.bcast, ext)
    return TermType(exts, flags, x.live)


def _contract(op: str, attrs: tuple, args: Sequence[TermType], ext: Extents, what: str) -> TermType:
    """matmul: a's dim 0 against b's dim 1, dims >= 2 batch dims (element-wise)."""
    x, y = args
    _family(what, x, y)
    if x.rank < 2:
        raise IllFormedTerm(f"{what}: matmul of rank {x.rank}")
    if 0 in x.bcast and 1 in y.bcast:
        raise IllFormedTerm(f"{what}: contracts two broadcast dims, of unknown extent")
    if 0 not in x.bcast and 1 not in y.bcast:
        ext.unify(x.extents[0], y.extents[1], f"{what}: contraction extents differ")
    batch, bflags = _pointwise(what, x.extents[2:], y.extents[2:], {f - 2 for f in x.bcast if f >= 2},
                               {f - 2 for f in y.bcast if f >= 2}, ext)
    flags = {1} & x.bcast | {0} & y.bcast | {f + 2 for f in bflags}
    return TermType((y.extents[0], x.extents[1]) + batch, frozenset(flags), x.live)


def _pointwise(what: str, xs: tuple[Extent, ...], ys: tuple[Extent, ...], fx: set | frozenset,
               fy: set | frozenset, ext: Extents) -> tuple[tuple[Extent, ...], frozenset[int]]:
    """Element-wise extents: equal, or one side broadcast along the dim."""
    out = []
    for d, (ex, ey) in enumerate(zip(xs, ys)):
        if d not in fx and d not in fy:
            ext.unify(ex, ey, f"{what}: extents of dim {d} differ and neither operand is broadcast")
        out.append(ey if d in fx and d not in fy else ex)
    return tuple(out), frozenset(set(fx) & set(fy))


RULES: dict[Shape, Typing] = {Shape.SAME: _same, Shape.BROADCAST: _broadcast, Shape.REDUCE: _reduce,
                              Shape.CONTRACT: _contract}
"""Typing rules of table-op terms, keyed by their family's shape rule (group ops have no terms of their own)."""
