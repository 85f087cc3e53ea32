"""The equivalence axioms over part/comb/red/repl, each written once as an equation between two patterns.

Rule sets are functions that yield rules, one rule per line, the line being the mathematics: pattern
variables are the tensors a, b, c, t, v, the data dims d, e, the parallel dims p, q and the constant k.
`RULESETS` lists the loaded ones; `register` adds one (the axioms of a new accumulator kind's reducer).
Families of rules come from the op-family sets of `prism.verify.expr` (UNARY, BINARY, LINEAR_UNARY, ...),
which are derived from the op table's families and traits, so a new op gets its family's rules.

Direction. `->` rules are loaded into the e-graph left to right, `=` rules both ways (fewer directions
mean fewer egglog rules, and egglog's cost per iteration grows with them). The forms the rules drive
towards: part, repl, comb move outwards (towards the root) past compute ops, where comb cancels part
(`comb(part(t,d,p),d,p) = t`); red moves inwards onto the split-K and partial-sum patterns where it
cancels; constant factors, signs and broadcasts move outwards past contractions and sums. Both sides of
a check are seeded. The §6 "inverse" rules (`matmul(part(a,1,p), repl(b,p)) -> part(matmul(a,b),1,p)`)
replace the directions of the paper's axioms that would invent variables.

Soundness. Broadcasting is explicit (`bcast`), so every rule about a broadcast operand names it and can
only fire on one. `red(repl(t,p),p)` is (size of p) * t and no rule touches it. Rules marked `derived`
follow from the loaded ones; they are kept for the record (the paper's table), tested numerically like
every rule, and tests check the checker proves each of them from the loaded set.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations, product
from typing import Callable, Iterator

from prism.ir.ops import refresh
from prism.verify import expr as X
from prism.verify.expr import (
    Attr, Sym, Term, Var, bcast, comb, div, exp, make, matmul, max_, once, part, red, redmax, repl, scale, shift, sqrt,
    square, sub, sum_,
)

__all__ = ["Rule", "RULESETS", "register", "unregister", "rules", "derived_rules", "all_rules", "sum_forms", "ne",
           "ge"]

Cond = tuple[str, Attr, Attr]


@dataclass(frozen=True)
class Rule:
    """lhs = rhs for all values of the pattern variables that satisfy `when`.

    `both`: loaded in both directions (needs the same variables on both sides). `derived`: implied by
    the loaded rules, so not loaded.
    """

    name: str
    lhs: Term
    rhs: Term
    when: tuple[Cond, ...] = ()
    both: bool = False
    derived: bool = False
    op: str | None = None  # the element-wise op this instance of a family rule is about

    def family_key(self) -> str:
        """The egglog text with the op name made a variable: equal for all instances of one family rule."""
        if self.op is None:
            return ""
        return self.egglog().replace(f'"{self.op}"', "fam")

    def __str__(self) -> str:
        cond = "".join(f", {x} {op} {y}" for op, x, y in self.when)
        return f"{self.name}: {self.lhs} {'=' if self.both else '->'} {self.rhs}{cond}"

    def egglog(self) -> str:
        """The rule as egglog text."""
        when = f" :when ({' '.join(f'({op} {_egg(x)} {_egg(y)})' for op, x, y in self.when)})" if self.when else ""
        kind = "birewrite" if self.both else "rewrite"
        return f"({kind} {self.lhs.text} {self.rhs.text}{when})"


def _egg(x: Attr) -> str:
    return x.name if isinstance(x, Sym) else f'"{x}"' if isinstance(x, str) else repr(x)


def ne(x: Attr, y: Attr) -> Cond:
    """Side condition x != y."""
    return ("!=", x, y)


def ge(x: Attr, y: Attr) -> Cond:
    """Side condition x >= y (data dims)."""
    return (">=", x, y)


def R(name: str, lhs: Term, rhs: Term, *when: Cond, of: str | None = None) -> Rule:  # noqa: N802
    """A rule loaded left to right (`of`: the family op it is an instance for)."""
    return Rule(name, lhs, rhs, tuple(when), op=of)


def E(name: str, lhs: Term, rhs: Term, *when: Cond, of: str | None = None) -> Rule:  # noqa: N802
    """An equation loaded both ways."""
    return Rule(name, lhs, rhs, tuple(when), both=True, op=of)


def D(name: str, lhs: Term, rhs: Term, *when: Cond) -> Rule:  # noqa: N802
    """A derived equation: tested and proven from the others, not loaded."""
    return Rule(name, lhs, rhs, tuple(when), derived=True)


a, b, c, t, v = (Var(f"?{n}") for n in "abctv")
d, e = Sym("d", "dim"), Sym("e", "dim")
p, q = Sym("p", "pdim"), Sym("q", "pdim")
k = Sym("k", "const")


def op(name: str, *args: Term) -> Term:
    """Apply an op of a family by name; a constant op gets the pattern constant k."""
    return make(name, *args, attrs=(k,) if name in X.CONST_UNARY else ())


def raw(name: str, x: Term, y: Term) -> Term:
    """A binary term with its operands in the order given (commutativity rules need the unsorted form)."""
    return Term(name, (x, y))


# ---------------------------------------------------------------- rule sets

def algebra() -> Iterator[Rule]:
    """Compute-op algebra (no parallel ops)."""
    yield R("add-comm", raw("add", a, b), raw("add", b, a))
    yield R("mul-comm", raw("mul", a, b), raw("mul", b, a))
    yield R("mul-div", raw("mul", a, div(b, c)), div(raw("mul", a, b), c))  # a quotient moves out of a product:
    # an RMSNorm's weight times the normalized row is the weighted row over its norm, which a matmul then carries
    yield E("matmul-assoc", matmul(a, matmul(b, c)), matmul(matmul(a, b), c))
    # Distributivity is not loaded right to left: A@C + B@C is well formed for A, B of different widths
    # when C's rows are broadcast, and A + B is not.
    for f in X.LINEAR_BINARY:
        yield R(f"matmul-{f}-left", matmul(op(f, a, b), c), op(f, matmul(a, c), matmul(b, c)))
        yield R(f"matmul-{f}-right", matmul(a, op(f, b, c)), op(f, matmul(a, b), matmul(a, c)))
    for f in X.LINEAR_FIRST:  # a per-row scale commutes with the contraction, so does a per-column one
        yield R(f"matmul-{f}-rows", matmul(op(f, a, bcast(v, 0)), b), op(f, matmul(a, b), bcast(v, 0)))
        yield R(f"matmul-{f}-cols", matmul(a, op(f, b, bcast(v, 1))), op(f, matmul(a, b), bcast(v, 1)))
    for f in X.LINEAR_UNARY:  # constant factors and signs move out of contractions and sums
        yield R(f"matmul-{f}-left", matmul(op(f, a), b), op(f, matmul(a, b)))
        yield R(f"matmul-{f}-right", matmul(a, op(f, b)), op(f, matmul(a, b)))
        yield R(f"sum-{f}", sum_(op(f, t), d), op(f, sum_(t, d)))
    yield R("sum-sum", sum_(sum_(t, d), d), sum_(t, d))  # summing an extent-1 dim changes nothing
    yield R("sum-sum-comm", sum_(sum_(t, d), e), sum_(sum_(t, e), d), ne(d, e))


def commute() -> Iterator[Rule]:
    """Parallel ops over different parallel dims commute; comb cancels part."""
    yield E("part-repl", part(repl(t, p), d, q), repl(part(t, d, q), p), ne(p, q))
    yield E("comb-repl", comb(repl(t, p), d, q), repl(comb(t, d, q), p), ne(p, q))
    yield E("red-part", red(part(t, d, q), p), part(red(t, p), d, q), ne(p, q))
    yield E("comb-red", comb(red(t, p), d, q), red(comb(t, d, q), p), ne(p, q))
    yield E("red-repl", red(repl(t, q), p), repl(red(t, p), q), ne(p, q))
    yield R("comb-part", comb(part(t, e, q), d, p), part(comb(t, d, p), e, q), ne(d, e), ne(p, q))
    yield R("part-part", part(part(t, d, p), e, q), part(part(t, e, q), d, p), ne(d, e), ne(p, q))
    yield R("comb-comb", comb(comb(t, d, p), e, q), comb(comb(t, e, q), d, p), ne(d, e), ne(p, q))
    yield R("repl-repl", repl(repl(t, p), q), repl(repl(t, q), p), ne(p, q))
    yield R("red-red", red(red(t, p), q), red(red(t, q), p), ne(p, q))
    yield R("comb-part-cancel", comb(part(t, d, p), d, p), t)
    yield R("once-repl", once(repl(t, p), p), t)   # one of a family of copies is the copy (an output written once)
    yield R("part-comb-cancel", part(comb(t, d, p), d, p), t)


def parallel_matmul() -> Iterator[Rule]:
    """Parallelised matmul: split-K, and the §6 inverse rules for row, column and batch partitions."""
    yield R("split-k", red(matmul(part(a, 0, p), part(b, 1, p)), p), matmul(a, b))
    yield R("matmul-rows", matmul(part(a, 1, p), repl(b, p)), part(matmul(a, b), 1, p))
    yield R("matmul-cols", matmul(repl(a, p), part(b, 0, p)), part(matmul(a, b), 0, p))
    yield R("matmul-batch", matmul(part(a, d, p), part(b, d, p)), part(matmul(a, b), d, p), ge(d, 2))
    yield R("matmul-repl", matmul(repl(a, p), repl(b, p)), repl(matmul(a, b), p))
    yield R("red-matmul-left", red(matmul(a, repl(b, p)), p), matmul(red(a, p), b))
    yield R("red-matmul-right", red(matmul(repl(a, p), b), p), matmul(a, red(b, p)))
    # the paper's forms, each one inverse rule followed by comb-part-cancel
    yield D("paper-matmul-rows", comb(matmul(part(a, 1, p), repl(b, p)), 1, p), matmul(a, b))
    yield D("paper-matmul-cols", comb(matmul(repl(a, p), part(b, 0, p)), 0, p), matmul(a, b))
    yield D("paper-matmul-batch", comb(matmul(part(a, d, p), part(b, d, p)), d, p), matmul(a, b), ge(d, 2))


def parallel_sum() -> Iterator[Rule]:
    """Sums over data dims against parallel ops; the compound forms follow (see sum_forms)."""
    yield R("sum-part", sum_(part(t, d, p), e), part(sum_(t, e), d, p), ne(d, e))
    yield R("sum-comb", sum_(comb(t, d, p), e), comb(sum_(t, e), d, p), ne(d, e))
    yield R("sum-repl", sum_(repl(t, p), d), repl(sum_(t, d), p))
    yield R("sum-red", sum_(red(t, p), d), red(sum_(t, d), p))
    yield R("red-sum-part", red(sum_(part(t, d, p), d), p), sum_(t, d))  # partial sums of the chunks
    yield R("sum-comb-same", sum_(comb(t, d, p), d), red(sum_(t, d), p))  # a sum over a concatenation
    # split-K partial sums concatenated along e, then summed in groups (group_sum, written with part and red
    # by prism.verify.encode): the sum they were split from
    yield D("group-sum-partials", red(part(comb(sum_(part(t, d, p), d), e, p), e, p), p), sum_(t, d))


def parallel_max() -> Iterator[Rule]:
    """Maxima over data dims (max) and over families (redmax): a max commutes with what it does not reduce,
    a max over chunks is the max of the chunks' maxima, and a max of copies is the copy (idempotence)."""
    yield R("max-part", max_(part(t, d, p), e), part(max_(t, e), d, p), ne(d, e))
    yield R("max-comb", max_(comb(t, d, p), e), comb(max_(t, e), d, p), ne(d, e))
    yield R("max-repl", max_(repl(t, p), d), repl(max_(t, d), p))
    yield R("max-redmax", max_(redmax(t, p), d), redmax(max_(t, d), p))
    yield R("max-bcast", max_(bcast(v, d), e), bcast(max_(v, e), d), ne(d, e))
    yield R("max-max", max_(max_(t, d), d), max_(t, d))  # a max over an extent-1 dim changes nothing
    yield R("redmax-max-part", redmax(max_(part(t, d, p), d), p), max_(t, d))  # the chunks' maxima
    yield R("max-comb-same", max_(comb(t, d, p), d), redmax(max_(t, d), p))    # a max over a concatenation
    yield R("redmax-repl", redmax(repl(t, p), p), t)                           # max(t, ..., t) = t
    yield E("redmax-part", redmax(part(t, d, q), p), part(redmax(t, p), d, q), ne(p, q))
    yield E("comb-redmax", comb(redmax(t, p), d, q), redmax(comb(t, d, q), p), ne(p, q))
    yield E("redmax-repl-other", redmax(repl(t, q), p), repl(redmax(t, p), q), ne(p, q))


def softmax_shift() -> Iterator[Rule]:
    """Why subtracting a max before exp (numerically safe softmax) computes the same function: exp turns the
    shift into a factor, which a sum or a row of a matmul carries out, and a ratio of two things scaled by
    the same exp (never zero) is the ratio of the unscaled ones. Any shift works; the max keeps exp <= 1."""
    yield R("exp-sub", exp(sub(a, bcast(v, d))), div(exp(a), bcast(exp(v), d)))    # e^(a-v) = e^a / e^v
    yield R("sum-div-same", sum_(div(t, bcast(v, d)), d), div(sum_(t, d), v))       # v is 1 along d
    yield R("ratio-exp", div(div(a, bcast(exp(c), d)), bcast(div(b, exp(c)), d)), div(a, bcast(b, d)))


def split_softmax() -> Iterator[Rule]:
    """Why split-KV's safe combine is right (FlashDecoding's): split k's sums come scaled by exp(-m_k) for its
    own max m_k, and kernel 2 multiplies them by exp(m_k - M), M the largest. An element-wise op of
    concatenated members and a broadcast value (M) is that op member by member; exp(m_k) cancels between the
    scale and the sums (exp is never 0); then both sums carry the same exp(-M), which cancels in their ratio.
    A value broadcast twice along a dim is broadcast once."""
    for f in X.BINARY:
        yield R(f"{f}-comb-bcast", raw(f, comb(a, d, p), bcast(v, d)), comb(raw(f, a, bcast(repl(v, p), d)), d, p),
                of=f)
        if f not in X.COMMUTATIVE:
            yield R(f"{f}-bcast-comb", raw(f, bcast(v, d), comb(a, d, p)),
                    comb(raw(f, bcast(repl(v, p), d), a), d, p), of=f)
    yield R("bcast-bcast", bcast(bcast(v, d), d), bcast(v, d))
    yield R("rescale-cancel", raw("mul", div(a, exp(c)), div(exp(c), b)), div(a, b))
    yield R("rescale-cancel-bcast", raw("mul", div(a, bcast(exp(c), d)), bcast(div(exp(c), b), d)),
            div(a, bcast(b, d)))
    yield R("ratio-exp-bcast", div(div(a, bcast(exp(c), d)), bcast(div(b, bcast(exp(c), d)), d)),
            div(a, bcast(b, d)))


def elementwise() -> Iterator[Rule]:
    """Element-wise ops commute with part, repl and comb; linear ones also with red."""
    for f in X.UNARY + X.CONST_UNARY:
        yield R(f"{f}-part", op(f, part(t, d, p)), part(op(f, t), d, p), of=f)
        yield R(f"{f}-repl", op(f, repl(t, p)), repl(op(f, t), p), of=f)
        yield R(f"{f}-comb", op(f, comb(t, d, p)), comb(op(f, t), d, p), of=f)
        yield R(f"{f}-bcast", op(f, bcast(t, d)), bcast(op(f, t), d), of=f)
    for f in X.LINEAR_UNARY:
        yield R(f"{f}-red", red(op(f, t), p), op(f, red(t, p)), of=f)
    for f in X.BINARY:
        yield R(f"{f}-part", op(f, part(a, d, p), part(b, d, p)), part(op(f, a, b), d, p), of=f)
        yield R(f"{f}-repl", op(f, repl(a, p), repl(b, p)), repl(op(f, a, b), p), of=f)
        # only this way: comb(f(a, b)) -> f(comb(a), comb(b)) would comb a broadcast operand that varies
        yield R(f"{f}-comb", op(f, comb(a, d, p), comb(b, d, p)), comb(op(f, a, b), d, p), of=f)
        yield R(f"{f}-bcast", op(f, bcast(a, d), bcast(b, d)), bcast(op(f, a, b), d), of=f)
    for f in X.LINEAR_BINARY:
        yield R(f"red-{f}", red(op(f, a, b), p), op(f, red(a, p), red(b, p)), of=f)
    for f in X.LINEAR_FIRST:  # a factor that is the same in every member comes out of the sum
        yield R(f"red-{f}-repl", red(op(f, a, repl(v, p)), p), op(f, red(a, p), v), of=f)


def broadcast() -> Iterator[Rule]:
    """A broadcast operand against parallel ops and sums."""
    yield E("part-bcast-same", part(bcast(v, d), d, p), repl(bcast(v, d), p))  # every chunk is the same
    yield R("part-bcast", bcast(part(v, e, p), d), part(bcast(v, d), e, p), ne(d, e))
    yield R("repl-bcast", bcast(repl(v, p), d), repl(bcast(v, d), p))
    yield R("comb-bcast", bcast(comb(v, e, p), d), comb(bcast(v, d), e, p), ne(d, e))
    yield R("red-bcast", bcast(red(v, p), d), red(bcast(v, d), p))
    yield R("sum-bcast", sum_(bcast(v, d), e), bcast(sum_(v, e), d), ne(d, e))


def patterns() -> Iterator[Rule]:
    """Whole patterns of the LLM workloads, derived from the rules above."""
    rms = bcast(sqrt(shift(scale(sum_(square(a), 0), k), 1e-6)), 0)
    yield D("rmsnorm-matmul", div(matmul(a, b), rms), matmul(div(a, rms), b))
    yield D("softmax-matmul", matmul(div(exp(a), bcast(sum_(exp(a), 0), 0)), b),
            div(matmul(exp(a), b), bcast(sum_(exp(a), 0), 0)))
    safe = exp(sub(a, bcast(max_(a, 0), 0)))  # softmax with its row max subtracted (safe in float16)
    yield D("safe-softmax-matmul", div(matmul(safe, b), bcast(sum_(safe, 0), 0)),
            div(matmul(exp(a), b), bcast(sum_(exp(a), 0), 0)))
    yield D("paper-sum-form-6",  # the paper's form 6 holds only under a sum (the extents differ otherwise)
            sum_(red(part(red(part(t, d, p), p), d, q), q), d), sum_(t, d), ne(p, q))


def sum_forms(depth: int) -> Iterator[Rule]:
    """sum(t, d) computed with d split over `depth` parallel dims, in every way a µGraph can write it.

    t is split along d by p0 (innermost) ... p{depth-1}; the dims are eliminated in any order, each by red
    (members add up) or comb (members concatenate, a later sum adds them), optionally after a per-member
    sum. These are the paper's compound parallelised-sum axioms (forms 1-5, and 7-8 under a sum),
    instantiated to the given depth.
    """
    ps = [Sym(f"p{i}", "pdim") for i in range(depth)]
    split = t
    for pi in ps:
        split = part(split, d, pi)
    when = tuple(ne(x, y) for i, x in enumerate(ps) for y in ps[i + 1:])
    for order in permutations(ps):
        for ops in product(("red", "comb"), repeat=depth):
            for first_sum in (False, True):
                x = sum_(split, d) if first_sum else split
                for pi, o in zip(order, ops):
                    x = red(x, pi) if o == "red" else comb(x, d, pi)
                tag = "".join(f"{o[0]}{pi.name[1:]}" for pi, o in zip(order, ops))
                yield D(f"sum-form-{depth}-{'s' if first_sum else ''}{tag}", sum_(x, d), sum_(t, d), *when)


RuleSet = Callable[[], Iterator[Rule]]
RULESETS: list[RuleSet] = [algebra, commute, parallel_matmul, parallel_sum, parallel_max, softmax_shift,
                           split_softmax, elementwise, broadcast]
"""The rule sets loaded into the e-graph, in order."""


def register(ruleset: RuleSet) -> RuleSet:
    """Load `ruleset` too (the axioms of a new accumulator kind's reducer, prism.ir.kinds.register); e-graphs
    built before get rebuilt."""
    RULESETS.append(ruleset)
    refresh()
    return ruleset


def unregister(ruleset: RuleSet) -> None:
    """Stop loading `ruleset`, given to `register`."""
    RULESETS.remove(ruleset)
    refresh()


def rules(max_pdims: int = 3, *, shortcuts: bool = False) -> list[Rule]:
    """The rules loaded into the e-graph for expressions with up to `max_pdims` parallel dims.

    The base rules are depth-free (the compound sums follow from red-sum-part, sum-comb-same and the
    commutations), so `max_pdims` only matters with `shortcuts`, which also loads sum_forms up to that
    depth as one-step rewrites.
    """
    out = [r for ruleset in RULESETS for r in ruleset() if not r.derived]
    if shortcuts:
        out += [Rule(r.name, r.lhs, r.rhs, r.when) for n in range(1, max_pdims + 1) for r in sum_forms(n)]
    return out


def derived_rules(max_pdims: int = 3) -> list[Rule]:
    """Equations implied by `rules()`: the paper's forms of its table and whole workload patterns."""
    out = [r for r in [*parallel_matmul(), *parallel_sum(), *patterns()] if r.derived]
    return out + [r for n in range(1, max_pdims + 1) for r in sum_forms(n)]


def all_rules(max_pdims: int = 3) -> list[Rule]:
    """Every axiom, loaded or derived: what the numeric tests enumerate."""
    return rules(max_pdims) + derived_rules(max_pdims)
