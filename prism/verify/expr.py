"""Verification expressions: immutable, hashable terms over tensors, with part/comb/red/repl.

The term language is derived from the op table (prism.ir.ops): every op with a verification term is a
term constructor, written as its family writes it, and the op-family sets the axioms are stated over
(UNARY, BINARY, ...) come from the ops' families and traits. The reducers over a parallel dim (red, redmax)
are the accumulator kinds' (prism.ir.kinds). Re-derived whenever either table changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterator, Sequence, Union

from prism.errors import IllFormedTerm, VerificationError
from prism.ir import ops
from prism.ir.kinds import reducers
from prism.ir.ops import OPS, Family, OpDef, watch
from prism.verify import types
from prism.verify.types import TermType, Typing, input_type, step

__all__ = [
    "Term", "Sym", "TermOp", "TERMS", "UNARY", "BINARY", "COMMUTATIVE", "LINEAR_UNARY", "LINEAR_BINARY",
    "LINEAR_FIRST", "CONST_UNARY", "PARALLEL",
    "Var", "matmul", "exp", "silu", "gelu", "relu", "sqrt", "square", "neg", "add", "sub", "mul", "div",
    "sum_", "scale", "shift", "bcast", "part", "comb", "red", "redmax", "once", "repl", "max_", "maximum",
    "Attr", "TermType", "make", "parse", "pdims_of", "subterms", "is_ground",
]


@dataclass(frozen=True)
class Sym:
    """A pattern variable standing for a data dim (kind "dim"), parallel dim ("pdim") or constant ("const")."""

    name: str
    kind: str

    def __str__(self) -> str:
        return self.name


Attr = Union[int, str, float, Sym, tuple[int, ...]]


@dataclass(frozen=True)
class TermOp:
    """One term constructor: arity, attribute kinds, egglog constructor, typing rule, and the table op it
    writes (None for the structural ones: var, bcast, part, comb, red, repl)."""

    name: str
    arity: int
    attrs: tuple[str, ...]  # kinds of the attributes after the operands: "dim", "pdim", "const", "name", "shape"
    egg: str  # egglog constructor name
    family: bool = False  # egglog constructor shared by a family, the op name its first argument
    rule: Typing | None = None  # its typing rule (prism.verify.types; None for var, typed by its shape)
    op: OpDef | None = None


@dataclass(frozen=True)
class FamilyTerms:
    """How the ops of one op family are written as terms: `egg`, the egglog constructor; `shared`: one
    constructor for the whole family, with the op's term name first, so that one rule covers the family
    (egglog's cost per iteration grows with the rule count); `attrs`: the kind of each term attribute ("dim",
    "const"), one per op attribute."""

    egg: str
    shared: bool = False
    attrs: tuple[str, ...] = ()


FAMILY_TERMS: dict[Family, FamilyTerms] = {
    ops.UNARY: FamilyTerms("Unary", shared=True),
    ops.SCALAR: FamilyTerms("ConstOp", shared=True, attrs=("const",)),
    ops.BINARY: FamilyTerms("Binary", shared=True),
    ops.REDUCE: FamilyTerms("Sum", attrs=("dim",)),
    ops.MAX_REDUCE: FamilyTerms("Max", attrs=("dim",)),
    ops.MATMUL: FamilyTerms("MatMul"),
}
"""The term constructors of the families whose ops have terms (the others' ops are written through a
decomposition or a parallel form: prism.verify.encode)."""


def family_terms(d: OpDef) -> FamilyTerms:
    """The terms of op `d`'s family; a family without them is named (a new op's family needs an entry)."""
    if d.family not in FAMILY_TERMS:
        raise VerificationError(f"op {d.name} has a term ({d.term}) but its family {d.family.name} has no term "
                                f"constructor in prism.verify.expr.FAMILY_TERMS")
    return FAMILY_TERMS[d.family]


PARALLEL: tuple[str, ...] = ()
"""The parallel ops: part, comb, the accumulator kinds' reducers (red, redmax, ...), once, repl."""
_VAR = TermOp("var", 0, ("name", "shape"), "Var")

TERMS: dict[str, TermOp] = {}
"""Every term constructor once: var, the table ops' terms (in table order), then the structural ones."""
UNARY: tuple[str, ...] = ()  # element-wise, no attributes
CONST_UNARY: tuple[str, ...] = ()  # element-wise with a constant
BINARY: tuple[str, ...] = ()  # element-wise, same rank; broadcasting only through bcast
COMMUTATIVE: tuple[str, ...] = ()  # operands sorted in Python; the e-graph has commutativity, no associativity
LINEAR_UNARY: tuple[str, ...] = ()  # f(a + b) = f(a) + f(b): commute with red and sum
LINEAR_BINARY: tuple[str, ...] = ()  # f(a + b, c + d) = f(a, c) + f(b, d): red distributes over them
LINEAR_FIRST: tuple[str, ...] = ()  # linear in the first operand: a factor the same in every member comes out
_BY_EGG: dict[tuple[str, str | None], TermOp] = {}


@watch
def _derive() -> None:
    """The term language from the op table and the accumulator kinds. Element-wise families share one egglog
    constructor (`(Unary "exp" t)`), so that a rule about the whole family is one egglog rule instead of one per
    op."""
    global UNARY, CONST_UNARY, BINARY, COMMUTATIVE, LINEAR_UNARY, LINEAR_BINARY, LINEAR_FIRST, PARALLEL
    table = [d for d in OPS.values() if d.term is not None]
    PARALLEL = ("part", "comb", *reducers(), "once", "repl")
    TERMS.clear()
    TERMS.update({t.name: t for t in [
        _VAR,
        *(TermOp(d.term, d.arity, family_terms(d).attrs, family_terms(d).egg, family_terms(d).shared,
                 types.RULES[d.family.rule], d) for d in table),
        TermOp("bcast", 1, ("dim",), "Bcast", rule=types.bcast),
        *(TermOp(n, 1, ("dim", "pdim") if n in ("part", "comb") else ("pdim",), n.capitalize(), rule=types.parallel)
          for n in PARALLEL)]})
    _BY_EGG.clear()
    _BY_EGG.update({(t.egg, t.name if t.family else None): t for t in TERMS.values()})

    def terms(keep) -> tuple[str, ...]:
        return tuple(d.term for d in table if keep(d))

    UNARY = terms(lambda d: d.family.elementwise and d.arity == 1 and not family_terms(d).attrs)
    CONST_UNARY = terms(lambda d: d.family.elementwise and d.arity == 1 and family_terms(d).attrs == ("const",))
    BINARY = terms(lambda d: d.family.elementwise and d.arity == 2)
    COMMUTATIVE = terms(lambda d: d.commutative)
    LINEAR_UNARY = terms(lambda d: d.linear and d.arity == 1)
    LINEAR_BINARY = terms(lambda d: d.linear and d.arity == 2)
    LINEAR_FIRST = terms(lambda d: d.linear_first)


@dataclass(frozen=True, eq=False)
class Term:
    """One node: op name, tensor operands, attributes (dims, parallel dims, constants, input name and shape).

    Equality and hash are structural; the hash and the egglog text are computed once, since terms are
    shared DAGs that the checker hashes and prints many times. A ground term over inputs of known shape
    is typed when it is built (`type`, prism.verify.types): an ill-formed one raises IllFormedTerm there.
    """

    op: str
    args: tuple[Term, ...] = ()
    attrs: tuple[Attr, ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)
    _text: str = field(init=False, repr=False, compare=False)
    _type: TermType | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        info = TERMS.get(self.op)
        if info is None:
            raise VerificationError(f"unknown op {self.op!r}")
        if len(self.args) != info.arity or len(self.attrs) != len(info.attrs):
            raise VerificationError(f"{self.op} takes {info.arity} operands and attributes {info.attrs}")
        for a in self.args:
            if not isinstance(a, Term):
                raise VerificationError(f"{self.op}: operand {a!r} is not a Term")
        for kind, a in zip(info.attrs, self.attrs):
            _check_attr(self.op, kind, a)
        object.__setattr__(self, "_text", _egg_text(self))
        object.__setattr__(self, "_hash", hash(self._text))
        object.__setattr__(self, "_type", self._infer())

    def _infer(self) -> TermType | None:
        """The type, or None for a pattern or a term over an input of unknown shape."""
        if self.op == "var":
            name, shape = self.attrs
            return input_type(shape) if shape and not name.startswith("?") else None
        if any(a._type is None for a in self.args) or any(isinstance(a, Sym) for a in self.attrs):
            return None
        try:
            return step(TERMS[self.op].rule, self.op, self.attrs, [a._type for a in self.args])
        except IllFormedTerm as e:
            text = str(self)
            raise IllFormedTerm(f"ill-formed term {text if len(text) < 200 else text[:197] + '...'}: {e}",
                                e.need) from None

    @property
    def type(self) -> TermType | None:
        """What the term is over (prism.verify.types.TermType); None if it has pattern variables or an
        input of unknown shape."""
        return self._type

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Term) and self._hash == other._hash and self._text == other._text)

    def __lt__(self, other: Term) -> bool:
        return self._text < other._text

    @property
    def text(self) -> str:
        """Canonical egglog text; a tensor variable of a rule pattern prints as a bare identifier."""
        return self._text

    def __str__(self) -> str:
        if self.op == "var":
            return str(self.attrs[0]).lstrip("?")
        parts = [str(a) for a in self.args] + [_attr_str(a) for a in self.attrs]
        return f"{self.op}({', '.join(parts)})"

    def __repr__(self) -> str:
        return f"Term<{self}>"


def _check_attr(op: str, kind: str, a: Attr) -> None:
    if isinstance(a, Sym):
        if a.kind != kind:
            raise VerificationError(f"{op}: pattern variable {a.name} is a {a.kind}, expected a {kind}")
        return
    ok = {
        "dim": isinstance(a, int) and not isinstance(a, bool) and a >= 0,
        "pdim": isinstance(a, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a) is not None,
        "const": isinstance(a, float) and math.isfinite(a),
        "name": isinstance(a, str) and re.fullmatch(r"\??[A-Za-z_][A-Za-z0-9_]*", a) is not None,
        "shape": isinstance(a, tuple) and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in a),
    }[kind]
    if not ok:
        raise VerificationError(f"{op}: bad {kind} attribute {a!r}")


def _attr_str(a: Attr) -> str:
    return repr(a) if isinstance(a, float) else str(a)


def _attr_egg(kind: str, a: Attr) -> str:
    if isinstance(a, Sym):
        return a.name
    if kind in ("pdim", "name"):
        return f'"{a}"'
    if kind == "shape":
        return '"' + "x".join(map(str, a)) + '"'
    return repr(a)  # ints; floats print with '.' or 'e', which egglog reads as f64


def _egg_text(t: Term) -> str:
    info = TERMS[t.op]
    if t.op == "var" and isinstance(t.attrs[0], str) and t.attrs[0].startswith("?"):
        return t.attrs[0][1:]  # a pattern variable (see Var)
    parts = [info.egg] + ([f'"{t.op}"'] if info.family else []) + [a._text for a in t.args]
    parts += [_attr_egg(k, a) for k, a in zip(info.attrs, t.attrs)]
    return "(" + " ".join(parts) + ")"


# ---------------------------------------------------------------- constructors (the term language)

def make(op: str, *args: Term, attrs: tuple[Attr, ...] = ()) -> Term:
    """Build any term by op name; commutative operands are put in canonical (sorted) order."""
    if op in COMMUTATIVE and len(args) == 2 and args[1] < args[0]:
        args = (args[1], args[0])
    kinds = TERMS[op].attrs if op in TERMS else ()
    attrs = tuple(float(a) if k == "const" and isinstance(a, int) and not isinstance(a, bool) else a
                  for k, a in zip(kinds, attrs)) if len(kinds) == len(attrs) else attrs
    return Term(op, tuple(args), attrs)


def Var(name: str, shape: Sequence[int] = ()) -> Term:  # noqa: N802 - reads as the math
    """An input tensor of `shape` (first axis first). In a rule pattern, Var("?t") is the pattern
    variable t; without a shape the input's type, and so every type above it, is unknown."""
    return Term("var", (), (name, tuple(shape)))


def matmul(a: Term, b: Term) -> Term:
    """Batched matmul: contracts a's data dim 0 with b's data dim 1; dims >= 2 are batch dims."""
    return make("matmul", a, b)


def _unary(op: str):
    def f(a: Term) -> Term:
        return make(op, a)
    f.__name__ = op
    f.__doc__ = f"Element-wise {op}."
    return f


exp, silu, gelu, relu = _unary("exp"), _unary("silu"), _unary("gelu"), _unary("relu")
sqrt, square, neg = _unary("sqrt"), _unary("square"), _unary("neg")


def add(a: Term, b: Term) -> Term:
    """Element-wise a + b (operands sorted)."""
    return make("add", a, b)


def sub(a: Term, b: Term) -> Term:
    """Element-wise a - b."""
    return make("sub", a, b)


def mul(a: Term, b: Term) -> Term:
    """Element-wise a * b (operands sorted)."""
    return make("mul", a, b)


def div(a: Term, b: Term) -> Term:
    """Element-wise a / b."""
    return make("div", a, b)


def sum_(a: Term, d: int | Sym) -> Term:
    """Sum over data dim d (counted from the last axis), keeping it with extent 1."""
    return make("sum", a, attrs=(d,))



def max_(a: Term, d: int | Sym) -> Term:
    """Max over data dim d (counted from the last axis), keeping it with extent 1."""
    return make("max", a, attrs=(d,))


def maximum(a: Term, b: Term) -> Term:
    """Element-wise max of a and b (operands sorted)."""
    return make("maximum", a, b)

def scale(a: Term, c: float | Sym) -> Term:
    """a * c for a constant c."""
    return make("scale", a, attrs=(float(c) if not isinstance(c, Sym) else c,))


def shift(a: Term, c: float | Sym) -> Term:
    """a + c for a constant c."""
    return make("shift", a, attrs=(float(c) if not isinstance(c, Sym) else c,))


def bcast(a: Term, d: int | Sym) -> Term:
    """a has extent 1 along d; stretch it along d to whatever extent the other operand has."""
    return make("bcast", a, attrs=(d,))


def part(a: Term, d: int | Sym, p: str | Sym) -> Term:
    """Split data dim d into equal chunks; chunk k goes to member k of the new family axis p."""
    return make("part", a, attrs=(d, p))


def comb(a: Term, d: int | Sym, p: str | Sym) -> Term:
    """Concatenate the p-family along data dim d (inverse of part)."""
    return make("comb", a, attrs=(d, p))


def redmax(a: Term, p: str | Sym) -> Term:
    """Element-wise max of the p-family (a loop's running max, finally)."""
    return make("redmax", a, attrs=(p,))


def red(a: Term, p: str | Sym) -> Term:
    """Element-wise sum of the p-family."""
    return make("red", a, attrs=(p,))


def once(a: Term, p: str | Sym) -> Term:
    """Member 0 of the p-family (what an output written once over p holds); a only if its members are copies."""
    return make("once", a, attrs=(p,))


def repl(a: Term, p: str | Sym) -> Term:
    """A p-family of identical copies of a."""
    return make("repl", a, attrs=(p,))


# ---------------------------------------------------------------- utilities

def subterms(t: Term) -> Iterator[Term]:
    """Every distinct node of t, operands before users."""
    seen: set[Term] = set()
    stack: list[tuple[Term, bool]] = [(t, False)]
    while stack:
        node, done = stack.pop()
        if done:
            yield node
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args))


def is_ground(t: Term) -> bool:
    """True iff t has no pattern variables (it can be evaluated or checked, not only matched)."""
    return not any((n.op == "var" and n.attrs[0].startswith("?")) or any(isinstance(a, Sym) for a in n.attrs)
                   for n in subterms(t))


def pdims_of(t: Term) -> set[str]:
    """All parallel dims named anywhere in t (the depth the axioms must be instantiated to)."""
    out: set[str] = set()
    for n in subterms(t):
        for kind, a in zip(TERMS[n.op].attrs, n.attrs):
            if kind == "pdim" and isinstance(a, str):
                out.add(a)
    return out


_TOKEN = re.compile(r'\s*(?:(\()|(\))|("[^"]*")|([^\s()"]+))')


def parse(text: str) -> Term:
    """Read a ground term back from its egglog text (expressions travel to worker processes as text)."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise VerificationError(f"cannot parse term at {text[pos:pos + 20]!r}")
        tokens.append(m.group(0).strip())
        pos = m.end()
    tokens = [t for t in tokens if t]

    def go(i: int) -> tuple[Term, int]:
        if tokens[i] != "(":
            raise VerificationError(f"expected '(' at token {i}: {tokens[i]!r}")
        ctor = tokens[i + 1]
        info = _BY_EGG.get((ctor, None))
        if info is None:
            info = _BY_EGG.get((ctor, tokens[i + 2].strip('"')))
            i += 1
        if info is None:
            raise VerificationError(f"unknown constructor {ctor!r}")
        i += 2
        args = []
        for _ in range(info.arity):
            a, i = go(i)
            args.append(a)
        attrs: list[Attr] = []
        for kind in info.attrs:
            tok = tokens[i]
            i += 1
            attrs.append(tok[1:-1] if kind in ("pdim", "name") else int(tok) if kind == "dim"
                         else tuple(int(n) for n in tok[1:-1].split("x") if n) if kind == "shape" else float(tok))
        if tokens[i] != ")":
            raise VerificationError(f"expected ')' at token {i}: {tokens[i]!r}")
        return make(info.name, *args, attrs=tuple(attrs)), i + 1

    try:
        term, end = go(0)
    except (IndexError, ValueError) as err:
        raise VerificationError(f"cannot parse term {text[:60]!r}: {err}") from None
    if end != len(tokens):
        raise VerificationError("trailing text after term")
    return term
