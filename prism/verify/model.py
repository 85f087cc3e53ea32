"""Executable meaning of verification expressions: families of float64 tensors at concrete parallel sizes.

A broadcast value (made by `bcast(t, d)`) keeps extent 1 along d and a mark saying "any extent": a binary
op stretches it to the other operand, matmul stretches a broadcast contraction dim, part along it hands
every member the same value (as repl), comb along it needs members that are all equal, and a sum over it
has no meaning (its extent is unknown); once over p is member 0 (what the first block writes). This is what lets a rule about broadcast operands be tested.
A table op's term means the op's torch meaning (prism.ir.ops), applied member by member.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from prism.errors import VerificationError
from prism.ir.kinds import reducers
from prism.ir.ops import OPS, OpDef, Shape
from prism.verify.expr import TERMS, Term

__all__ = ["Value", "IllFormed", "evaluate", "same_value"]


class IllFormed(VerificationError):
    """A term has no meaning at these shapes and sizes (misaligned families, wrong extents, bad splits)."""


@dataclass(frozen=True)
class Value:
    """A family of tensors: `data` has one leading axis per parallel dim in `pdims`, then the data axes.

    `bdims` are the data dims (counted from the last axis) that are broadcast: they have extent 1 here and
    stand for any extent, which is how `bcast` marks an operand that stretches in a binary op.
    """

    data: torch.Tensor
    pdims: tuple[str, ...]
    bdims: frozenset[int]

    @property
    def rank(self) -> int:
        """Number of data dims of each family member."""
        return self.data.dim() - len(self.pdims)

    def axis(self, d: int) -> int:
        """Tensor axis of data dim d (counted from the last axis)."""
        if not 0 <= d < self.rank:
            raise IllFormed(f"data dim {d} out of range for rank {self.rank}")
        return self.data.dim() - 1 - d

    def aligned(self, pdims: tuple[str, ...]) -> torch.Tensor:
        """The data with its family axes permuted into the order `pdims`."""
        if set(pdims) != set(self.pdims):
            raise IllFormed(f"families differ: {self.pdims} vs {pdims}")
        perm = [self.pdims.index(p) for p in pdims] + list(range(len(self.pdims), self.data.dim()))
        return self.data.permute(perm)


def evaluate(term: Term, env: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> Value:
    """Evaluate `term` with inputs `env` (name -> tensor) and parallel sizes `sizes` (pdim -> size).

    Raises IllFormed when the term means nothing at these shapes and sizes. Shared subterms are evaluated
    once.
    """
    memo: dict[Term, Value] = {}

    def ev(t: Term) -> Value:
        v = memo.get(t)
        if v is None:
            v = memo[t] = _eval(t, [ev(a) for a in t.args], env, sizes)
        return v

    return ev(term)


def _size(sizes: Mapping[str, int], p: object) -> int:
    if not isinstance(p, str) or p not in sizes:
        raise IllFormed(f"no size for parallel dim {p!r}")
    n = sizes[p]
    if n < 1:
        raise IllFormed(f"size of {p} must be positive, got {n}")
    return n


def _eval(t: Term, args: list[Value], env: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> Value:
    op = t.op
    if op == "var":
        name = t.attrs[0]
        if name not in env:
            raise IllFormed(f"no input named {name!r}")
        return Value(env[name].to(torch.float64), (), frozenset())
    opdef = TERMS[op].op if op in TERMS else None
    if opdef is not None:  # a table op: its torch meaning, by its family's shape rule
        return _MEANINGS[opdef.family.rule](opdef, t, args)
    if op == "bcast":
        (a,), d = args, t.attrs[0]
        if d in a.bdims:  # already stretches along d: the same value (as prism.verify.types has it)
            return a
        if a.data.shape[a.axis(d)] != 1:
            raise IllFormed(f"bcast along dim {d} needs extent 1 there, got shape {tuple(a.data.shape)}")
        return Value(a.data, a.pdims, a.bdims | {d})
    if op in ("part", "repl"):
        (a,) = args
        p = t.attrs[-1]
        n = _size(sizes, p)
        if p in a.pdims:
            raise IllFormed(f"{op} over {p}, which already indexes the family {a.pdims}")
        if op == "part" and t.attrs[0] not in a.bdims:
            return _part(a, t.attrs[0], p, n)
        # repl, or part of a broadcast dim: every chunk of a constant-along-d tensor is that constant
        return Value(a.data.unsqueeze(0).expand(n, *a.data.shape), (p,) + a.pdims, a.bdims)
    combine = reducers().get(op)
    if op == "once":   # what the first block along p writes
        (a,) = args
        p = t.attrs[-1]
        if p not in a.pdims:
            raise IllFormed(f"once over {p}, which does not index the family {a.pdims}")
        i = a.pdims.index(p)
        return Value(a.data.select(i, 0), a.pdims[:i] + a.pdims[i + 1:], a.bdims)
    if op == "comb" or combine is not None:
        (a,) = args
        p = t.attrs[-1]
        if p not in a.pdims:
            raise IllFormed(f"{op} over {p}, which does not index the family {a.pdims}")
        i = a.pdims.index(p)
        rest = a.pdims[:i] + a.pdims[i + 1:]
        if combine is not None:  # a reducer: its accumulator's combine op folded over the members (red adds them)
            return Value(functools.reduce(OPS[combine].torch_fn, a.data.unbind(i)), rest, a.bdims)
        d = t.attrs[0]
        if d in a.bdims:
            # concatenating copies of a broadcast value is that value; anything else has no extent to name
            first = a.data.select(i, 0)
            if not torch.allclose(a.data, first.unsqueeze(i).expand_as(a.data), equal_nan=True):
                raise IllFormed(f"comb along broadcast dim {d} of members that differ")
            return Value(first, rest, a.bdims)
        ax = a.axis(d)
        x = a.data.movedim(i, ax - 1)
        shape = list(x.shape)
        shape[ax - 1:ax + 1] = [shape[ax - 1] * shape[ax]]
        return Value(x.reshape(shape), rest, a.bdims)
    raise IllFormed(f"model has no meaning for op {op!r}")


def _same(opdef: OpDef, t: Term, args: list[Value]) -> Value:
    (a,) = args
    return Value(opdef.torch_fn(a.data, **dict(zip(opdef.attrs, t.attrs))), a.pdims, a.bdims)


def _reduce(opdef: OpDef, t: Term, args: list[Value]) -> Value:
    (a,), d = args, t.attrs[0]
    if d in a.bdims:
        raise IllFormed(f"{t.op} over broadcast dim {d}: its extent is unknown")
    return Value(opdef.torch_fn(a.data, a.axis(d)), a.pdims, a.bdims)


_MEANINGS: dict[Shape, Callable[[OpDef, Term, list[Value]], Value]] = {
    Shape.SAME: _same,
    Shape.BROADCAST: lambda opdef, t, args: _binary(opdef.torch_fn, *args),
    Shape.REDUCE: _reduce,
    Shape.CONTRACT: lambda opdef, t, args: _matmul(opdef.torch_fn, *args),
}
"""Meanings of table-op terms, keyed by the op family's shape rule (prism.ir.ops.Family.rule)."""


def _part(a: Value, d: int, p: str, n: int) -> Value:
    ax = a.axis(d)
    extent = a.data.shape[ax]
    if extent % n:
        raise IllFormed(f"cannot split extent {extent} of dim {d} into {n} chunks")
    shape = list(a.data.shape)
    shape[ax:ax + 1] = [n, extent // n]
    return Value(a.data.reshape(shape).movedim(ax, 0), (p,) + a.pdims, a.bdims)


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: Value, b: Value) -> Value:
    if a.rank != b.rank:
        raise IllFormed(f"binary operands of rank {a.rank} and {b.rank}")
    bd = b.aligned(a.pdims)
    k = len(a.pdims)
    out_b: set[int] = set()
    for d in range(a.rank):
        ea, eb = a.data.shape[a.axis(d)], bd.shape[k + b.rank - 1 - d]
        fa, fb = d in a.bdims, d in b.bdims
        if fa and fb:
            out_b.add(d)
        elif fa == fb and ea != eb:
            raise IllFormed(f"extents {ea} and {eb} differ along dim {d} and neither operand is broadcast")
    return Value(fn(a.data, bd), a.pdims, frozenset(out_b))


def _matmul(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: Value, b: Value) -> Value:
    """Batched matmul; a broadcast contraction dim stretches to the other operand's extent."""
    if a.rank != b.rank or a.rank < 2:
        raise IllFormed(f"matmul operands of rank {a.rank} and {b.rank}")
    x, y = a.data, b.aligned(a.pdims)
    if 0 in a.bdims and 1 in b.bdims:
        raise IllFormed("matmul contracting two broadcast dims: the extent is unknown")
    if 0 in a.bdims:
        x = x.expand(*x.shape[:-1], y.shape[-2])
    elif 1 in b.bdims:
        y = y.expand(*y.shape[:-2], x.shape[-1], y.shape[-1])
    k = len(a.pdims)
    flags = {d for d in (1,) if d in a.bdims} | {d for d in (0,) if d in b.bdims}
    for d in range(2, a.rank):
        fa, fb = d in a.bdims, d in b.bdims
        ea, eb = x.shape[k + a.rank - 1 - d], y.shape[k + a.rank - 1 - d]
        if fa and fb:
            flags.add(d)
        elif fa == fb and ea != eb:
            raise IllFormed(f"matmul batch extents {ea} and {eb} differ along dim {d}")
    if x.shape[-1] != y.shape[-2]:
        raise IllFormed(f"matmul shapes {tuple(x.shape[k:])} and {tuple(y.shape[k:])} do not fit")
    return Value(fn(x, y), a.pdims, frozenset(flags))


def same_value(x: Value, y: Value, *, rtol: float = 1e-7) -> bool:
    """True iff two values are the same family: same parallel dims, broadcast dims, shape and numbers.

    NaNs must sit in the same places; the absolute tolerance scales with the magnitude of the values.
    """
    if set(x.pdims) != set(y.pdims) or x.bdims != y.bdims:
        return False
    yd = y.aligned(x.pdims)
    if x.data.shape != yd.shape:
        return False
    finite = torch.isfinite(x.data) & torch.isfinite(yd)
    mag = float(x.data[finite].abs().max()) if finite.any() else 1.0
    return torch.allclose(x.data, yd, rtol=rtol, atol=rtol * max(1.0, mag), equal_nan=True)
