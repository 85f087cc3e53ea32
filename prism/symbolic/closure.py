"""The target's algebraic closure: the term set that expression-guided pruning (paper §3.3) tests against.

The program's output term is rewritten, once, under a small list of sound algebraic rules until no new
term appears (or a cap is hit); `roots` are all the whole-program forms reached, `subterms` every
subterm of every root. With every d_p = 1 a candidate tensor's abstract term must be one of
`subterms`, and a finished candidate's output one of `roots`. The rules only add forms, so a bigger
rule list prunes less; it never prunes a candidate whose terms the rules can reach.

Rules (r is a row-broadcast operand: its last dim is UNIT; c a column-broadcast one: dim -2 is UNIT), stated
over sets of ops derived from the op table's families and traits (matmul: a contraction; · and /: element-wise
ops linear in their first operand, commutative or not; ·s: a linear op with a constant; sum: a sum over a dim):
  f(x)                 -> f's decomposition (prism.ir.ops), for a composite f: an op with no
                          verification term of its own, as rms_norm(x) -> x / sqrt(sum(x², -1) · 1/N + eps)
  matmul(a / r, b)    <-> matmul(a, b) / r                      (same with a · r)
  matmul(a, b / c)    <-> matmul(a, b) / c                      (same with b · c)
  matmul(a·s, b)      <-> matmul(a, b)·s,  matmul(a, b·s) <-> matmul(a, b)·s   (s a scalar constant)
  sum(a·s, d)         <-> sum(a, d)·s
  sum(a / v, d)       <-> sum(a, d) / v                         (v's dim d is UNIT; same with a · v)
  (a / r) · b         <-> (a · b) / r                           (elementwise, any broadcast)

and one rule on whole forms only (`SHIFT_FORMS`): where a form divides by sum(exp(a), d), and uses sum(exp(a), d)
nowhere else, every exp(a) in it becomes exp(a - max(a, d)), and back: the max-subtracted softmax, whose
fused forms (a running max, online accumulators) never overflow, and the paper's exp/sum/div, whatever
form the program is written in. A ratio is invariant under the common factor exp(-max), so the new form
is equal when exp(a) enters the numerator linearly, as in softmax and attention; the rule does not check
that (pruning needs no soundness: the verifier decides). Which ops play its parts (the ratio, the sum, the
exponential, the shift, the bound) is the op table's online-softmax rule (prism.ir.ops.OnlineRule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from prism.ir.ops import OPS, REDUCE, SCALAR, OnlineRule, contracts, watch
from prism.symbolic.dims import UNIT, AtomSpace, InvExtent
from prism.symbolic.terms import Term, attrs_of, kids, mk, op_of, subterms, term_shape

__all__ = ["RULES", "SHIFT_FORMS", "Target", "closure", "vocabulary_ops"]

Rule = Callable[[Term, AtomSpace], Iterator[Term]]


def _unit_at(t: Term, space: AtomSpace, pos: int) -> bool:
    s = term_shape(t, space)
    return s is not None and len(s) >= -pos and s[pos] == UNIT


class _Builder:
    """Decompositions written as terms: a mean's 1/N is the input extent it stands for (InvExtent)."""

    def __init__(self, space: AtomSpace) -> None:
        self.space = space

    def __call__(self, op: str, *children: Term, **attrs: object) -> Term:
        return mk(op, tuple(attrs[a] for a in OPS[op].attrs), *children)

    def rank(self, t: Term) -> int:
        return len(term_shape(t, self.space))  # type: ignore[arg-type]

    def inv_extent(self, t: Term, dim: int) -> float | InvExtent:
        atom = term_shape(t, self.space)[dim]  # type: ignore[index]
        return 1.0 if atom == UNIT else InvExtent(*self.space.owner(atom))


def _expand(t: Term, space: AtomSpace) -> Iterator[Term]:
    """f(x) -> f's decomposition, for an op the verifier expands too (no term of its own)"""
    d = OPS.get(op_of(t))
    if d is None or d.term is not None or any(term_shape(c, space) is None for c in kids(t)):
        return
    yield d.decompose(_Builder(space), *kids(t), **dict(zip(d.attrs, attrs_of(t))))


_PRODUCTS: set[str] = set()
"""Element-wise ops a · r, linear in a, whose operands commute (mul): a factor r constant along a dim moves past
a sum or a contraction over that dim, and past a quotient."""
_QUOTIENTS: set[str] = set()
"""Element-wise ops a / r, linear in a, whose operands do not commute (div)."""
_SCALES: set[str] = set()
"""Products and quotients: a ∘ r."""
_CONSTANT_SCALES: set[str] = set()
"""a · s for a constant s (mul_scalar)."""
_SUMS: set[str] = set()
"""Sums over a dim (sum)."""


@watch
def _sets() -> None:
    """The op sets the rules are stated over, from the op table's families and traits."""
    scales = {n: d for n, d in OPS.items() if d.family.elementwise and d.arity == 2 and d.linear_first}
    for into, names in ((_PRODUCTS, [n for n, d in scales.items() if d.commutative]),
                        (_QUOTIENTS, [n for n, d in scales.items() if not d.commutative]),
                        (_SCALES, list(scales)),
                        (_CONSTANT_SCALES, [n for n, d in OPS.items() if d.family is SCALAR and d.linear]),
                        (_SUMS, [n for n, d in OPS.items() if d.family is REDUCE])):
        into.clear()
        into.update(names)


def _factored(t: Term) -> list[tuple[Term, ...]]:
    """(x, factor) for each way scale term t reads as x ∘ factor: both ways round for a product."""
    return [kids(t), kids(t)[::-1]] if op_of(t) in _PRODUCTS else [kids(t)]


def _matmul_scale(t: Term, space: AtomSpace) -> Iterator[Term]:
    """matmul(a ∘ r, b) <-> matmul(a, b) ∘ r and matmul(a, b ∘ c) <-> matmul(a, b) ∘ c for ∘ in (/, ·)"""
    op = op_of(t)
    if contracts(op):
        a, b = kids(t)
        for side, inner in ((0, a), (1, b)):
            if op_of(inner) not in _SCALES:
                continue
            pos = -1 if side == 0 else -2
            for x, v in _factored(inner):
                if _unit_at(v, space, pos):
                    mm = mk(op, (), x, b) if side == 0 else mk(op, (), a, x)
                    yield mk(op_of(inner), (), mm, v)
        for side, inner in ((0, a), (1, b)):
            if op_of(inner) in _CONSTANT_SCALES:
                mm = mk(op, (), kids(inner)[0], b) if side == 0 else mk(op, (), a, kids(inner)[0])
                yield mk(op_of(inner), attrs_of(inner), mm)
    elif op in _SCALES:
        for mm, v in _factored(t):
            if not contracts(op_of(mm)):
                continue
            a, b = kids(mm)
            if _unit_at(v, space, -1):
                yield mk(op_of(mm), (), mk(op, (), a, v), b)
            if _unit_at(v, space, -2):
                yield mk(op_of(mm), (), a, mk(op, (), b, v))
    elif op in _CONSTANT_SCALES and contracts(op_of(kids(t)[0])):
        mm, (a, b) = op_of(kids(t)[0]), kids(kids(t)[0])
        yield mk(mm, (), mk(op, attrs_of(t), a), b)
        yield mk(mm, (), a, mk(op, attrs_of(t), b))


def _sum_scale(t: Term, space: AtomSpace) -> Iterator[Term]:
    """sum(a·s, d) <-> sum(a, d)·s and sum(a ∘ v, d) <-> sum(a, d) ∘ v when v's dim d is UNIT"""
    op = op_of(t)
    if op in _SUMS:
        (inner,), (d,) = kids(t), attrs_of(t)
        if op_of(inner) in _CONSTANT_SCALES:
            yield mk(op_of(inner), attrs_of(inner), mk(op, (d,), kids(inner)[0]))
        elif op_of(inner) in _SCALES:
            for x, v in _factored(inner):
                if _unit_at(v, space, d):
                    yield mk(op_of(inner), (), mk(op, (d,), x), v)
    elif op in _CONSTANT_SCALES and op_of(kids(t)[0]) in _SUMS:
        s = kids(t)[0]
        yield mk(op_of(s), attrs_of(s), mk(op, attrs_of(t), kids(s)[0]))
    elif op in _SCALES:
        for s, v in _factored(t):
            if op_of(s) in _SUMS and _unit_at(v, space, attrs_of(s)[0]):
                yield mk(op_of(s), attrs_of(s), mk(op, (), kids(s)[0], v))


def _div_mul(t: Term, space: AtomSpace) -> Iterator[Term]:
    """(a / r) · b <-> (a · b) / r"""
    op = op_of(t)
    if op in _PRODUCTS:
        for x, b in (kids(t), kids(t)[::-1]):
            if op_of(x) in _QUOTIENTS:
                a, r = kids(x)
                yield mk(op_of(x), (), mk(op, (), a, b), r)
    elif op in _QUOTIENTS and op_of(kids(t)[0]) in _PRODUCTS:
        product, r, (a, b) = op_of(kids(t)[0]), kids(t)[1], kids(kids(t)[0])
        yield mk(product, (), mk(op, (), a, r), b)
        yield mk(product, (), a, mk(op, (), b, r))


RULES: tuple[Rule, ...] = (_expand, _matmul_scale, _sum_scale, _div_mul)


def _shift(t: Term, space: AtomSpace) -> Iterator[Term]:
    """t with every exp(a) replaced by exp(a - max(a, d)), or every exp(a - max(a, d)) by exp(a), for each
    sum(exp(.), d) that t only divides by."""
    subs = subterms(t)
    for den in sorted({kids(s)[1] for s in subs if _online(s).ratio}, key=repr):
        if not _online(den).summing or not _online(kids(den)[0]).exponential:
            continue
        if any(den in kids(s) for s in subs if not _online(s).ratio or kids(s)[1] != den or kids(s)[0] == den):
            continue
        e = kids(den)[0]
        if _exps_outside(t, den) != {e}:
            continue  # the numerator's exp must be the denominator's, or the common factor does not cancel
        (a,) = kids(e)
        shift = _online(a).shift
        x = kids(a)[shift.takes.index(None)] if shift is not None else None
        if x is not None and a == _shifted(x, _bound(den, x)):
            yield _replace(t, e, mk(op_of(e), (), x))
        else:
            yield _replace(t, e, mk(op_of(e), (), _shifted(a, _bound(den, a))))


def _online(t: Term) -> OnlineRule:
    """The online-softmax record of t's op (an input's is empty)."""
    d = OPS.get(op_of(t))
    return d.online if d is not None else _NO_PART


_NO_PART = OnlineRule()


def _shifted(x: Term, m: Term) -> Term:
    """x - m, with the op that shifts a value by a running max."""
    name, shift = next((n, d.online.shift) for n, d in OPS.items() if d.online.shift is not None)
    return mk(name, (), *(x if state is None else m for state in shift.takes))


def _bound(den: Term, a: Term) -> Term:
    """The bound of a over what sum `den` adds up: max(a, d) for sum(., d), the bound of the sum's shape rule."""
    rule = OPS[op_of(den)].family.rule
    name = next(n for n, d in OPS.items() if d.online.bound and d.family.rule is rule)
    return mk(name, attrs_of(den), a)


def _exps_outside(t: Term, den: Term) -> set[Term]:
    """The exp subterms of `t` outside every occurrence of `den`."""
    if t == den:
        return set()
    found = {t} if _online(t).exponential else set()
    for c in kids(t):
        found |= _exps_outside(c, den)
    return found


def _replace(t: Term, old: Term, new: Term) -> Term:
    """t with every occurrence of `old` replaced by `new`."""
    if t == old:
        return new
    if not kids(t):
        return t
    return mk(op_of(t), attrs_of(t), *(_replace(c, old, new) for c in kids(t)))


SHIFT_FORMS: Rule = _shift
"""The rule applied to whole forms only, before and after the saturation under RULES."""


def _rewrites(t: Term, space: AtomSpace) -> Iterator[Term]:
    """Every term one rule of RULES away from `t`, at any position."""
    for rule in RULES:
        yield from rule(t, space)
    ch = kids(t)
    for i, c in enumerate(ch):
        for c2 in _rewrites(c, space):
            yield mk(op_of(t), attrs_of(t), *ch[:i], c2, *ch[i + 1:])


@dataclass(frozen=True)
class Target:
    """The closure of a program's output term: its whole forms and the subterms of all of them."""

    space: AtomSpace
    root: Term
    roots: frozenset[Term]
    subterms: frozenset[Term]
    complete: bool
    vocabulary: tuple[tuple[str, tuple], ...] = field(default=())

    def shape(self) -> tuple[int, ...]:
        return term_shape(self.root, self.space)  # type: ignore[return-value]


def closure(root: Term, space: AtomSpace, cap: int = 20000) -> Target:
    """Saturate `root` (and its SHIFT forms) under RULES, then add the SHIFT forms of everything reached
    (a whole-term worklist; `complete` is False if `cap` forms were hit).

    SHIFT is applied around the saturation, not inside it: rewriting the two copies of a in
    exp(a - max(a, d)) independently would multiply the forms by the square of a's forms, all unequal."""
    shape = term_shape(root, space)
    seen = {root, *SHIFT_FORMS(root, space)}
    work = list(seen)
    complete = True
    while work and complete:
        t = work.pop()
        for u in _rewrites(t, space):
            if u not in seen and term_shape(u, space) == shape:
                if len(seen) >= cap:
                    complete = False
                    break
                seen.add(u)
                work.append(u)
    seen |= {u for t in list(seen) for u in SHIFT_FORMS(t, space)}
    subs: set[Term] = set()
    for t in seen:
        subterms(t, subs)
    vocab = sorted({(op_of(s), attrs_of(s)) for s in subs if op_of(s) != "in"}, key=repr)
    return Target(space, root, frozenset(seen), frozenset(subs), complete, tuple(vocab))


def vocabulary_ops(target: Target) -> list[tuple[str, tuple]]:
    """(op, attrs) pairs the generator may use, in registry order."""
    order = {name: k for k, name in enumerate(OPS)}
    return sorted(target.vocabulary, key=lambda v: (order[v[0]], repr(v[1])))
