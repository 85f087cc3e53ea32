"""A draft: a block-graph structure under construction whose maps and parallel sizes are symbolic (paper §2's
sGraph before its mapping is chosen; a verified one with its mapping is prism.search.result.SymbolicGraph).

A `Draft` is immutable; `extend` returns a new one. Tensor k is the output of op k; ops 0..n-1 are
the loaders of the kernel inputs in order. Each tensor dim is an atom (an input's data dim: its
tile extent is D/σ(atom)) or UNIT. Adding an op matches dims by coefficient matching, which unions
atoms (`dims.UnionFind`); dims of different full extent cannot match for all d_p, so the op is
refused. `labels` optionally fixes, per atom, the grid dim and loop flag already chosen (the
concrete ablation modes): matching then also requires the fixed choices to agree, as Mirage does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from prism.errors import GraphError
from prism.ir import kinds
from prism.ir.ops import OPS, RUNNING, Shape, watch
from prism.symbolic.dims import UNIT, AtomSpace, InvExtent, UnionFind
from prism.symbolic.terms import Term, leaf, mk

__all__ = ["LOAD_OP", "ACCUM_OP", "RUNNING_MAX_OP", "BOp", "Draft", "Labels", "match_binary", "match_matmul"]

LOAD_OP, ACCUM_OP, RUNNING_MAX_OP = kinds.LOADER.name, kinds.SUM.name, kinds.RUNNING_MAX.name
"""The block ops that are no table op: a loader, the plain accumulator (a sum; prism.ir.kinds.ACCUMULATORS
has the others) and a running max."""

Labels = tuple[tuple[int, int], ...]
"""Per atom: (grid dim index, or -1 for none, or -2 for symbolic; loop flag 0/1, or -2 for symbolic)."""


@dataclass(frozen=True)
class BOp:
    """One block op: `op` is a table op, LOAD_OP (attrs = (input index,)), RUNNING_MAX_OP or an accumulator
    (prism.ir.kinds.ACCUMULATORS; the online one's inputs are its tensor and the running max)."""

    op: str
    inputs: tuple[int, ...]
    attrs: tuple = ()

    def key(self) -> tuple:
        """The canonical-order key: inputs (largest first), op id, attrs, inputs as given."""
        return (tuple(sorted(self.inputs, reverse=True)), _OP_IDS[self.op], repr(self.attrs), self.inputs)


_OP_IDS: dict[str, int] = {}


@watch
def _number_ops() -> None:
    """Op ids for the canonical order: the loader, the accumulators, the running max, then the table ops."""
    _OP_IDS.clear()
    _OP_IDS.update((name, k) for k, name in enumerate([LOAD_OP, *kinds.ACCUMULATORS, RUNNING_MAX_OP, *OPS]))


def _union(uf: UnionFind, a: int, b: int, space: AtomSpace, labels: Labels | None) -> UnionFind | None:
    if space.extent(a) != space.extent(b):
        return None
    if labels is not None:
        (ga, la), (gb, lb) = labels[a], labels[b]
        if (ga != -2 and gb != -2 and ga != gb) or (la != -2 and lb != -2 and la != lb):
            return None
    return uf.union(a, b)


def match_binary(a: tuple[int, ...], b: tuple[int, ...], uf: UnionFind, space: AtomSpace,
                 labels: Labels | None = None) -> tuple[tuple[int, ...], UnionFind] | None:
    """Elementwise dims: class vs class unions, UNIT broadcasts; None if the ranks or extents clash."""
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x != UNIT and y != UNIT:
            uf2 = _union(uf, x, y, space, labels)
            if uf2 is None:
                return None
            uf = uf2
        out.append(y if x == UNIT else x)
    return tuple(out), uf


def match_matmul(a: tuple[int, ...], b: tuple[int, ...], uf: UnionFind, space: AtomSpace,
                 labels: Labels | None = None) -> tuple[tuple[int, ...], UnionFind] | None:
    """Batch dims and a's columns with b's rows must match exactly (UNIT only with UNIT)."""
    if len(a) < 2 or len(a) != len(b):
        return None
    for x, y in list(zip(a[:-2], b[:-2])) + [(a[-1], b[-2])]:
        if (x == UNIT) != (y == UNIT):
            return None
        if x != UNIT:
            uf2 = _union(uf, x, y, space, labels)
            if uf2 is None:
                return None
            uf = uf2
    return a[:-1] + b[-1:], uf


def op_dims(op: str, attrs: tuple, shapes: list[tuple[int, ...]], uf: UnionFind, space: AtomSpace,
            labels: Labels | None = None) -> tuple[tuple[int, ...], UnionFind] | None:
    """The result dims of a table op or an accumulator, and the unions it implies (None: incompatible)."""
    rule = Shape.SAME if op in kinds.ACCUMULATORS or op == RUNNING_MAX_OP else OPS[op].family.rule
    return _DIMS[rule](shapes, attrs, uf, space, labels)


def _reduce_dims(shapes: list, attrs: tuple, uf: UnionFind, space: AtomSpace,
                 labels: Labels | None) -> tuple[tuple[int, ...], UnionFind] | None:
    s = list(shapes[0])
    if not 0 <= attrs[0] < len(s):
        return None
    s[attrs[0]] = UNIT
    return tuple(s), uf


_DIMS = {  # keyed by the op family's shape rule (prism.ir.ops.Family.rule); group ops have no terms to search
    Shape.SAME: lambda shapes, attrs, uf, space, labels: (shapes[0], uf),
    Shape.BROADCAST: lambda shapes, attrs, uf, space, labels: match_binary(shapes[0], shapes[1], uf, space, labels),
    Shape.REDUCE: _reduce_dims,
    Shape.CONTRACT: lambda shapes, attrs, uf, space, labels: match_matmul(shapes[0], shapes[1], uf, space, labels),
}


@dataclass(frozen=True)
class Draft:
    """A partial or finished block graph with symbolic maps: ops, per-tensor dims/phase/term, classes, and
    how each tensor depends on a running max (`scale`: prism.ir.kinds.scaling's states, refs are indices).

    Whether a loader is loop-invariant depends on the mapping (the loop walks none of its dims), which is
    still symbolic. `inv` gives, per tensor computed from loaders alone by table ops, those loaders (None
    for the rest): such a tensor may meet post-loop values (LoRA's B times acc(X @ A)), and then its
    loaders join `invariant`, the loaders every mapping of this graph must leave to the grid
    (prism.symbolic.mapping.MappingProblem). A loader both pinned so and feeding an accumulator
    (`summed`: each accumulator's input loaders) is refused: the loop could then walk none of the dims that
    accumulator sums over, so such structures only ever have loop-free mappings, which others already
    give (measured while developing it, with pinning allowed everywhere: refusing them cut RMSNorm-MLP's
    generation at the tests' size from 153 s to 47 s, and the search found the same 102 graphs)."""

    space: AtomSpace
    ops: tuple[BOp, ...]
    dims: tuple[tuple[int, ...], ...]
    post: tuple[bool, ...]
    terms: tuple[Term, ...]
    uses: tuple[int, ...]
    uf: UnionFind
    labels: Labels | None = None
    scale: tuple[tuple[str, int] | None, ...] = ()
    inv: tuple[frozenset[int] | None, ...] = ()
    invariant: frozenset[int] = frozenset()
    summed: tuple[frozenset[int], ...] = ()
    pinning: bool = True

    @classmethod
    def start(cls, space: AtomSpace, labels: Labels | None = None, pinning: bool = True) -> Draft:
        """One loader per kernel input, nothing else. `pinning`: whether a loader's tile may meet post-loop
        values (the generator turns it off where the program has no use for it: prism.search.generator)."""
        n = len(space.shapes)
        return cls(space, tuple(BOp(LOAD_OP, (), (i,)) for i in range(n)),
                   tuple(space.input_dims(i) for i in range(n)), (False,) * n,
                   tuple(leaf(i) for i in range(n)), (0,) * n, UnionFind.identity(len(space)), labels, (None,) * n,
                   tuple(frozenset((i,)) for i in range(n)), pinning=pinning)

    @property
    def n_loaders(self) -> int:
        return len(self.space.shapes)

    @cached_property
    def n_accums(self) -> int:
        """Accumulators so far (asked for every candidate op of every state: computed once per state)."""
        return sum(1 for o in self.ops if o.op in kinds.ACCUMULATORS)

    def term(self, bop: BOp) -> Term:
        """The abstract term of `bop`'s result with every d_p = 1 (accumulators and a running max are then
        identities: over a loop of one tile, they are that tile)."""
        if bop.op in kinds.ACCUMULATORS or bop.op == RUNNING_MAX_OP:
            return self.terms[bop.inputs[0]]
        return mk(bop.op, bop.attrs, *(self.terms[i] for i in bop.inputs))

    def extend(self, bop: BOp, term: Term | None = None) -> Draft | str:
        """This graph plus `bop`, or the reason it cannot be added: "phase", "dims" or "scale" (a use of a
        running max that no online accumulator can rescale)."""
        phases = {self.post[i] for i in bop.inputs}
        accum = bop.op in kinds.ACCUMULATORS
        if len(phases) != 1 and (not self.pinning or any(self.inv[i] is None for i in bop.inputs
                                                         if not self.post[i])):
            return "phase"      # a loop value meets a post-loop one, and it is not loop-invariant
        if (accum or bop.op == RUNNING_MAX_OP) and True in phases:
            return "phase"
        matched = op_dims(bop.op, bop.attrs, [self.dims[i] for i in bop.inputs], self.uf, self.space,
                          self.labels)
        if matched is None:
            return "dims"
        dims, uf = matched
        scale = self._scaling(bop)
        if scale == "scale":
            return "scale"
        uses = list(self.uses)
        for i in set(bop.inputs):
            uses[i] += 1
        post = accum or True in phases
        pre = [self.inv[i] for i in bop.inputs if not self.post[i]]
        structural = accum or bop.op == RUNNING_MAX_OP
        inv = None if post or structural or None in pre else frozenset().union(*pre)
        invariant = self.invariant | (frozenset().union(*pre) if len(phases) == 2 else frozenset())
        summed = self.summed + ((self.inv[bop.inputs[0]],) if accum and self.inv[bop.inputs[0]] else ())
        if any(loaders & invariant for loaders in summed):
            return "phase"      # a tile both summed over the loop and used after it (see the class docstring)
        # the constructor, not dataclasses.replace: made for every state the generator reaches, and replace's
        # field-by-field copy was 3% of a search
        return Draft(self.space, self.ops + (bop,), self.dims + (dims,), self.post + (post,),
                     self.terms + (self.term(bop) if term is None else term,), tuple(uses) + (0,), uf, self.labels,
                     self.scale + (scale,), self.inv + (inv,), invariant, summed, self.pinning)

    def _scaling(self, bop: BOp) -> tuple[str, int] | None | str:
        """`bop`'s running-max state (prism.ir.kinds.scaling, with UNIT dims as extent 1), or "scale"."""
        def shape(i: int) -> tuple[int | None, ...]:
            return tuple(1 if a == UNIT else None for a in self.dims[i])

        if bop.op in OPS and all(self.scale[i] is None for i in bop.inputs):
            return None
        attrs = dict(zip(OPS[bop.op].attrs, bop.attrs)) if bop.op in OPS else {}
        running = {r: shape(r) for r, st in enumerate(self.scale) if st == (RUNNING, r)}
        try:
            return kinds.scaling(bop.op, attrs, [(shape(i), self.scale[i]) for i in bop.inputs], running,
                                 me=len(self.ops))
        except GraphError:
            return "scale"

    def classes(self) -> dict[int, tuple[int, ...]]:
        """Representative atom -> member atoms, over the atoms that are not UNIT."""
        live = [a for i in range(self.n_loaders) for a in self.space.input_dims(i) if a != UNIT]
        return self.uf.classes(live)

    def to_json(self) -> dict[str, Any]:
        return {"ops": [[o.op, list(o.inputs), [attr_json(a) for a in o.attrs]] for o in self.ops]}


def attr_json(a: Any) -> Any:
    """An op attribute as JSON (InvExtent becomes {"inv_extent": [input, dim]})."""
    return {"inv_extent": [a.index, a.dim]} if isinstance(a, InvExtent) else a


def attr_from_json(a: Any) -> Any:
    return InvExtent(*a["inv_extent"]) if isinstance(a, dict) else a
