"""Kernel graphs as verification terms: one term per output, over the graph's inputs, sizes left out.

A loader becomes `part`/`repl` per grid dim and the loop, an accumulator `red` over the loop, a saver
`comb`/`red` per grid dim (paper §4): each node kind's record (prism.ir.kinds) says which. A table op
becomes its term, or its decomposition's terms (prism.ir.ops). Sizes never enter a term, so a proof holds
for all parallel sizes (paper Definition 1). What the terms cannot express, that a tile shape agrees with
another only for some sizes, shows in the terms' types (prism.verify.types): each extent is the full
extent over the sizes of the parallel dims that split it, and a term whose extents agree only for some
sizes is ill formed (NotEncodable here). Broadcasting is made explicit with `bcast`, against extents of 1
only. A graph that is valid only for some sizes can be encoded under assumptions about them (`Assumed`,
prism.verify.size_constraints): a parallel dim written as a product of others, a group op's group count made a
parallel dim of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from prism.errors import IllFormedTerm
from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph
from prism.ir.kinds import (ACCUMULATORS, INVARIANT, LOADER, LOOP, MAX, SUM, Accumulator, Compute, Kind, Loader,
                             RunningMax, Saver, kind_of, rule_for)
from prism.ir.ops import GROUP, GROUP_SCALE, OPS, Family, OpDef, Shape, watch
from prism.ir.sizes import ONE, Extent, grid_size_name, loop_size_name
from prism.verify import expr as E
from prism.verify.size_constraints import Assumed, Cancel, Need, Whole

__all__ = ["ENCODE", "Encoding", "FOR_ALL_SIZES", "NotEncodable", "PARALLEL_FORMS", "encode"]

FOR_ALL_SIZES = Assumed()
"""No assumption: terms that hold for all parallel sizes."""


class NotEncodable(Exception):
    """The graph computes a well-defined function only for some parallel sizes (a shape coincidence);
    `need` says what those sizes satisfy, where it is known (prism.verify.size_constraints)."""

    def __init__(self, message: str, need: Need | None = None) -> None:
        super().__init__(message)
        self.need = need


@dataclass(frozen=True)
class Encoding:
    """The terms of a graph's outputs, and the parallel dims that occur in them."""

    outputs: tuple[E.Term, ...]
    pdims: frozenset[str]


def encode(graph: KernelGraph, assumed: Assumed = FOR_ALL_SIZES) -> Encoding:
    """Encode every output of `graph` (under `assumed`); raises NotEncodable on a size-dependent shape match."""
    graph.check()
    values: dict[tuple[int, int], E.Term] = {}
    for k, ref in enumerate(graph.input_refs):
        values[ref] = E.Var(f"in{k}", graph.type_of(ref).shape)
    kernels = 0
    try:
        for i, node in graph.topo():
            args = [values[r] for r in node.inputs]
            if node.op == "custom":
                outs = _encode_block(node.attrs["block"], args, kernels, assumed)
                kernels += 1
                values.update(((i, j), o) for j, o in enumerate(outs))
            elif node.op != "input":
                values[(i, 0)] = apply(node.op, args, node.attrs, assumed)
    except IllFormedTerm as e:
        raise NotEncodable(str(e), e.need) from None
    outputs = tuple(values[r] for r in graph.outputs)
    for k, t in enumerate(outputs):
        moving = [e for e in t.type.extents if e.mono]
        if moving:
            raise NotEncodable(f"output {k} has type {t.type}: its extents depend on parallel sizes (a grid dim "
                               "concatenates along a dim it does not split, and no group sum folds it back)",
                               Cancel(Extent(1, moving[0].mono)))
    return Encoding(outputs, frozenset().union(*(E.pdims_of(t) for t in outputs)))


def _axis(rank: int, d: int) -> int:
    """IR dims count from the front; term dims count from the last axis (0 = columns, 1 = rows)."""
    return rank - 1 - d


@dataclass
class _Block:
    """What the rules of `ENCODE` write with: the kernel's input terms, its grid dims' parallel dims (`pdims`)
    and the loop's (`loop`; None: no loop), the terms so far (`env`, by node), and the term constructors, which
    write the parallel dims as the assumptions say."""

    args: list[E.Term]
    pdims: dict[str, str]
    loop: str | None
    block: BlockGraph
    assumed: Assumed
    env: dict[int, E.Term] = field(default_factory=dict)
    outs: dict[int, E.Term] = field(default_factory=dict)

    def term(self, op: str, *args: E.Term, attrs: tuple[Any, ...] = ()) -> E.Term:
        """Term `op` on `args`. A parallel op over a dim the assumptions write as a product of dims is the
        same op over each of them: part by the outer one first and comb by the inner one first, so that
        member a·f + b of the product is member b of member a (prism.verify.size_constraints)."""
        if op not in E.PARALLEL:
            return E.make(op, *args, attrs=attrs)
        *head, p = attrs
        parts = self.assumed.factors(p)
        t = args[0]
        for q in reversed(parts) if op == "comb" else parts:
            t = E.make(op, t, attrs=(*head, q))
        return t

    def input(self, k: int) -> E.Term:
        return self.args[k]

    def looped(self, ref: tuple[int, int]) -> E.Term:
        """Node ref's term as a loop value: a loop-invariant one (encoded with no loop dim, so that it also
        meets values after the loop) replicated over the loop."""
        t = self.env[ref[0]]
        return self.term("repl", t, attrs=(self.loop,)) if self.loop and self.block.phase(ref) == INVARIANT else t

    def operand(self, i: int, ref: tuple[int, int]) -> E.Term:
        """Operand `ref` of node i, on node i's side of the loop."""
        return self.looped(ref) if self.block.phase((i, 0)) == LOOP else self.env[ref[0]]

    @staticmethod
    def axis(t: E.Term, d: int) -> int:
        return _axis(t.type.rank, d)

    def apply(self, op: str, args: list[E.Term], attrs: Mapping[str, Any]) -> E.Term:
        return apply(op, args, attrs, self.assumed)

    def output(self, k: int, t: E.Term) -> None:
        """A kernel output is one tensor (no live parallel dim); its extents may still depend on parallel sizes
        (partials a grid dim concatenates for a later kernel to sum in groups), a graph output's may not."""
        if t.type.live:
            raise NotEncodable(f"output {k} has type {t.type}: a split dim is never combined")
        self.outs[k] = t


def _encode_block(block: BlockGraph, args: list[E.Term], kernel: int, assumed: Assumed) -> list[E.Term]:
    has_loop = any(kind_of(n) is LOADER and n.attrs["fmap"] is not None for n in block.nodes) or block.loop > 1
    en = _Block(args, {g: grid_size_name(g, kernel) for g in block.grid_dims},
                loop_size_name(kernel) if has_loop else None, block, assumed)
    for i, node in block.topo():
        kind = kind_of(node)
        rule_for(ENCODE, kind, "the verification encoding")(en, i, node, kind)
    return [en.outs[k] for k in range(len(en.outs))]


# ---- the rules: each node kind's term ------------------------------------------------------------

def _load(en: _Block, i: int, node: Any, kind: Kind) -> None:
    """part along each mapped dim, repl for each grid dim that maps none; part along the loop for the dim it
    walks, and no loop dim at all for a loop-invariant tile (`looped` replicates it over the loop where it meets
    loop values)."""
    t = en.input(node.attrs["index"])
    splits = [(p, node.attrs["imap"].get(g)) for g, p in en.pdims.items()]
    splits += [(en.loop, node.attrs["fmap"])] if en.loop and node.attrs["fmap"] is not None else []
    for p, d in splits:
        t = en.term("repl", t, attrs=(p,)) if d is None else en.term("part", t, attrs=(en.axis(t, d), p))
    en.env[i] = t


def _op(en: _Block, i: int, node: Any, kind: Kind) -> None:
    en.env[i] = en.apply(node.op, [en.operand(i, r) for r in node.inputs], node.attrs)


def _reduce(en: _Block, i: int, node: Any, kind: Accumulator) -> None:
    """The accumulator's reducer over the loop (an online sum is a plain sum of tiles that use the final max,
    which is what a running max's term gives them)."""
    t = en.looped(node.inputs[0])
    en.env[i] = en.term(kind.reducer, t, attrs=(en.loop,)) if en.loop else t


def _running_max(en: _Block, i: int, node: Any, kind: Kind) -> None:
    """In every iteration, its final value: the max over the whole loop, replicated over it."""
    t = en.looped(node.inputs[0])
    en.env[i] = en.term("repl", en.term(MAX.reducer, t, attrs=(en.loop,)), attrs=(en.loop,)) if en.loop else t


def _store(en: _Block, i: int, node: Any, kind: Kind) -> None:
    """comb along each mapped dim, `once` (one member of a family of copies) over each once dim, red over each
    other grid dim."""
    t = en.env[node.inputs[0][0]]
    once = node.attrs.get("once", ())
    for g, p in en.pdims.items():
        d = node.attrs["omap"].get(g)
        t = en.term("comb", t, attrs=(en.axis(t, d), p)) if d is not None else \
            en.term("once" if g in once else SUM.reducer, t, attrs=(p,))
    en.output(node.attrs["index"], t)


ENCODE: dict[type, Callable[[_Block, int, Any, Any], None]] = {
    Loader: _load, Compute: _op, Accumulator: _reduce, RunningMax: _running_max, Saver: _store}
"""Each node kind's term: (the block's encoding, the node's index, the node, its kind)."""


@dataclass(frozen=True)
class _Terms:
    """The term builder a decomposition (prism.ir.ops) is written with: a mean's 1/N is a constant, so the
    extent must not depend on parallel sizes."""

    assumed: Assumed

    def __call__(self, op: str, *args: E.Term, **attrs: Any) -> E.Term:
        return apply(op, list(args), attrs, self.assumed)

    def rank(self, t: E.Term) -> int:
        return t.type.rank

    def inv_extent(self, t: E.Term, dim: int) -> float:
        e = t.type.extents[_axis(t.type.rank, dim)]
        if e.mono or e == ONE:
            raise NotEncodable(f"a mean over a dim of extent {e} depends on parallel sizes")
        return 1.0 / e.coef


def apply(op: str, args: list[E.Term], attrs: Mapping[str, Any], assumed: Assumed = FOR_ALL_SIZES) -> E.Term:
    """Table op `op` on term operands: its term, or its decomposition's where it has none."""
    d = OPS[op]
    if op in PARALLEL_FORMS:
        return PARALLEL_FORMS[op](args, _axis(args[0].type.rank, attrs["dim"]), attrs["size"], assumed)
    if d.term is None:
        if d.decompose is None:
            raise NotEncodable(f"op {op} has no verification term, decomposition or parallel form")
        return d.decompose(_Terms(assumed), *args, **attrs)
    if d.family.rule is Shape.BROADCAST:
        args = _broadcast(*args)
    term_attrs = tuple(_axis(args[0].type.rank, attrs[a]) if kind == "dim" else attrs[a]
                       for kind, a in zip(E.family_terms(d).attrs, d.attrs))
    return E.make(d.term, *args, attrs=term_attrs)


def _members(x: E.Term, d: int, size: int, assumed: Assumed) -> list[str]:
    """The parallel dims that concatenated x's groups of `size` along term dim d (its extent is size·p·q...),
    or the group count an assumption made a parallel dim of its own, or NotEncodable: groups of a dim of
    known extent (no parallel dim made them) have no such form for all sizes."""
    e = x.type.extents[d]
    if d in x.type.bcast:
        raise NotEncodable(f"a group op of size {size} over broadcast dim {d} of {x.type}: its extent is unknown")
    if e.coef == size and e.mono and all(k == 1 for _, k in e.mono):
        return assumed.outer_first([p for p, _ in e.mono])
    counted = assumed.groups(e, size)
    if counted is None:
        raise NotEncodable(f"a group op of size {size} over extent {e}: only the groups a grid dim concatenated "
                           "(extent size·p) can be verified", Whole(e, size))
    return [counted]


def _split(x: E.Term, d: int, pdims: list[str]) -> E.Term:
    for p in pdims:
        x = E.part(x, d, p)
    return x


Form = Callable[..., E.Term]
"""A parallel form: the term of a group op on operand terms, given the term dim it groups, the group size and
the size assumptions it is encoded under (prism.verify.size_constraints)."""


def _grouped(op: OpDef) -> Form:
    """A group reduction of the groups of `size` along term dim d, for x concatenated there by parallel dims
    p, q, ...: groups are then the members, so it is part along d by each of them, then the reducer of the
    op's accumulator (red for the sum, redmax for the max) over each. That is the op at every size, hence
    sound for all of them, in any order of p, q, ... (every group is one member either way); the order comb
    concatenated them in is the one the e-graph can cancel against."""
    reducer = ACCUMULATORS[op.accumulator].reducer

    def form(args: list[E.Term], d: int, size: int, assumed: Assumed = FOR_ALL_SIZES) -> E.Term:
        pdims = _members(args[0], d, size, assumed)
        x = _split(args[0], d, pdims)
        for p in reversed(pdims):
            x = E.make(reducer, x, attrs=(p,))
        return x
    return form


def _group_scale(args: list[E.Term], d: int, size: int, assumed: Assumed = FOR_ALL_SIZES) -> E.Term:
    """x times one scale per group: member by member, x's member times its scale (broadcast along d unless
    the groups are one wide), concatenated back in the same order."""
    x, s = args
    pdims = _members(x, d, size, assumed)
    if _members(s, d, 1, assumed) != pdims:
        raise NotEncodable(f"group_scale: the scales' groups ({s.type}) are not the operand's ({x.type})")
    out = apply("mul", [_split(x, d, pdims), _split(s, d, pdims)], {})
    for p in reversed(pdims):
        out = E.comb(out, d, p)
    return out


_FORMS: dict[Family, Callable[[OpDef], Form]] = {GROUP: _grouped, GROUP_SCALE: lambda op: _group_scale}
"""The parallel form of each op of a family verification writes with the parallel ops, keyed by family."""
PARALLEL_FORMS: dict[str, Form] = {}
"""Table ops verification writes with the parallel ops (part, red) instead of a term of their own, by op."""


@watch
def _derive() -> None:
    PARALLEL_FORMS.clear()
    PARALLEL_FORMS.update({name: _FORMS[d.family](d) for name, d in OPS.items() if d.family in _FORMS})


def _broadcast(a: E.Term, b: E.Term) -> list[E.Term]:
    """Where one operand has extent 1 and the other not, the first is an explicit bcast."""
    for d, (x, y) in enumerate(zip(a.type.extents, b.type.extents)):
        if x == ONE and y != ONE:
            a = E.bcast(a, d)
        elif y == ONE and x != ONE:
            b = E.bcast(b, d)
    return [a, b]
