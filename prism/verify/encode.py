"""Kernel graphs as verification terms: one term per output, over the graph's inputs, sizes left out.

A loader becomes `part`/`repl` per grid dim and the loop, an accumulator `red` over the loop, a saver
`comb`/`red` per grid dim (paper §4): each node kind's record (prism.ir.kinds) says which. A table op
becomes its term, or its decomposition's terms (prism.ir.ops). Sizes never enter a term, so a proof holds
for all parallel sizes (paper Definition 1). What the terms cannot express, that a tile shape agrees with
another only for some sizes, shows in the terms' types (prism.verify.types): each extent is the full
extent over the sizes of the parallel dims that split it, and a term whose extents agree only for some
sizes is ill formed (NotEncodable here). Broadcasting is made explicit with `bcast`, against extents of 1
only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from prism.errors import IllFormedTerm
from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph
from prism.ir.kinds import ACCUMULATORS, INVARIANT, LOADER, LOOP, kind_of
from prism.ir.ops import GROUP, GROUP_SCALE, OPS, Family, OpDef, Shape, watch
from prism.verify import expr as E
from prism.verify.types import ONE

__all__ = ["Encoding", "NotEncodable", "PARALLEL_FORMS", "encode", "loop_dim", "grid_pdim"]


class NotEncodable(Exception):
    """The graph computes a well-defined function only for some parallel sizes (a shape coincidence)."""


@dataclass(frozen=True)
class Encoding:
    """The terms of a graph's outputs, and the parallel dims that occur in them."""

    outputs: tuple[E.Term, ...]
    pdims: frozenset[str]


def grid_pdim(dim: str, kernel: int) -> str:
    return f"{dim}{kernel}"


def loop_dim(kernel: int) -> str:
    return f"i{kernel}"


def encode(graph: KernelGraph) -> Encoding:
    """Encode every output of `graph`; raises NotEncodable on a size-dependent shape match."""
    graph.check()
    values: dict[tuple[int, int], E.Term] = {}
    for k, ref in enumerate(graph.input_refs):
        values[ref] = E.Var(f"in{k}", graph.type_of(ref).shape)
    kernels = 0
    try:
        for i, node in graph.topo():
            args = [values[r] for r in node.inputs]
            if node.op == "custom":
                outs = _encode_block(node.attrs["block"], args, kernels)
                kernels += 1
                values.update(((i, j), o) for j, o in enumerate(outs))
            elif node.op != "input":
                values[(i, 0)] = apply(node.op, args, node.attrs)
    except IllFormedTerm as e:
        raise NotEncodable(str(e)) from None
    outputs = tuple(values[r] for r in graph.outputs)
    for k, t in enumerate(outputs):
        if any(e.mono for e in t.type.extents):
            raise NotEncodable(f"output {k} has type {t.type}: its extents depend on parallel sizes (a grid dim "
                               "concatenates along a dim it does not split, and no group sum folds it back)")
    return Encoding(outputs, frozenset().union(*(E.pdims_of(t) for t in outputs)))


def _axis(rank: int, d: int) -> int:
    """IR dims count from the front; term dims count from the last axis (0 = columns, 1 = rows)."""
    return rank - 1 - d


@dataclass
class _Block:
    """What a node kind's `encode` (prism.ir.kinds) writes with (prism.ir.passes.Encode): the kernel's input
    terms, its grid dims' parallel dims and the loop's (None: no loop), the terms so far, and the term
    constructors."""

    args: list[E.Term]
    pdims: dict[str, str]
    loop: str | None
    block: BlockGraph
    env: dict[int, E.Term] = field(default_factory=dict)
    outs: dict[int, E.Term] = field(default_factory=dict)

    term = staticmethod(E.make)

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

    @staticmethod
    def apply(op: str, args: list[E.Term], attrs: Mapping[str, Any]) -> E.Term:
        return apply(op, args, attrs)

    def output(self, k: int, t: E.Term) -> None:
        """A kernel output is one tensor (no live parallel dim); its extents may still depend on parallel sizes
        (partials a grid dim concatenates for a later kernel to sum in groups), a graph output's may not."""
        if t.type.live:
            raise NotEncodable(f"output {k} has type {t.type}: a split dim is never combined")
        self.outs[k] = t


def _encode_block(block: BlockGraph, args: list[E.Term], kernel: int) -> list[E.Term]:
    has_loop = any(kind_of(n) is LOADER and n.attrs["fmap"] is not None for n in block.nodes) or block.loop > 1
    en = _Block(args, {g: grid_pdim(g, kernel) for g in block.grid_dims}, loop_dim(kernel) if has_loop else None,
                block)
    for i, node in block.topo():
        kind_of(node).encode(en, i, node)
    return [en.outs[k] for k in range(len(en.outs))]


class _Terms:
    """The term builder a decomposition (prism.ir.ops) is written with: a mean's 1/N is a constant, so the
    extent must not depend on parallel sizes."""

    def __call__(self, op: str, *args: E.Term, **attrs: Any) -> E.Term:
        return apply(op, list(args), attrs)

    def rank(self, t: E.Term) -> int:
        return t.type.rank

    def inv_extent(self, t: E.Term, dim: int) -> float:
        e = t.type.extents[_axis(t.type.rank, dim)]
        if e.mono or e == ONE:
            raise NotEncodable(f"a mean over a dim of extent {e} depends on parallel sizes")
        return 1.0 / e.coef


def apply(op: str, args: list[E.Term], attrs: Mapping[str, Any]) -> E.Term:
    """Table op `op` on term operands: its term, or its decomposition's where it has none."""
    d = OPS[op]
    if op in PARALLEL_FORMS:
        return PARALLEL_FORMS[op](args, _axis(args[0].type.rank, attrs["dim"]), attrs["size"])
    if d.term is None:
        if d.decompose is None:
            raise NotEncodable(f"op {op} has no verification term, decomposition or parallel form")
        return d.decompose(_Terms(), *args, **attrs)
    if d.family.rule is Shape.BROADCAST:
        args = _broadcast(*args)
    term_attrs = tuple(_axis(args[0].type.rank, attrs[a]) if kind == "dim" else attrs[a]
                       for kind, a in zip(d.family.term_attrs, d.attrs))
    return E.make(d.term, *args, attrs=term_attrs)


def _members(x: E.Term, d: int, size: int) -> list[str]:
    """The parallel dims that concatenated x's groups of `size` along term dim d (its extent is size·p·q...),
    or NotEncodable: groups of a dim of known extent (no parallel dim made them) have no such form."""
    e = x.type.extents[d]
    if d in x.type.bcast or e.coef != size or not e.mono or any(k != 1 for _, k in e.mono):
        raise NotEncodable(f"a group op of size {size} over extent {e}: only the groups a grid dim concatenated "
                           "(extent size·p) can be verified")
    return [p for p, _ in e.mono]


def _split(x: E.Term, d: int, pdims: list[str]) -> E.Term:
    for p in pdims:
        x = E.part(x, d, p)
    return x


Form = Callable[[list[E.Term], int, int], E.Term]
"""A parallel form: the term of a group op on operand terms, given the term dim it groups and the group size."""


def _grouped(op: OpDef) -> Form:
    """A group reduction of the groups of `size` along term dim d, for x concatenated there by parallel dims
    p, q, ...: groups are then the members, so it is part along d by each of them, then the reducer of the
    op's accumulator (red for the sum, redmax for the max) over each. That is the op at every size, hence
    sound for all of them."""
    reducer = ACCUMULATORS[op.accumulator].reducer

    def form(args: list[E.Term], d: int, size: int) -> E.Term:
        pdims = _members(args[0], d, size)
        x = _split(args[0], d, pdims)
        for p in reversed(pdims):
            x = E.make(reducer, x, attrs=(p,))
        return x
    return form


def _group_scale(args: list[E.Term], d: int, size: int) -> E.Term:
    """x times one scale per group: member by member, x's member times its scale (broadcast along d unless
    the groups are one wide), concatenated back in the same order."""
    x, s = args
    pdims = _members(x, d, size)
    if _members(s, d, 1) != pdims:
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
