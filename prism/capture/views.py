"""Layout at the edges of a cone: the views folded into its inputs, and views of intermediates kept as shapes.

Prism's IR has no reshape, yet real models view everything: a `Linear` on a [batch, seq, hidden] activation
is `view` to [batch·seq, hidden], `mm`, `_unsafe_view` back. A view only reinterprets the row-major order of
elements, so the lowering never has to compute one. A value keeps two shapes:
  - its Prism tensor's shape P (what the kernel graph computes), and
  - its logical shape L (what torch's graph says at this point),
with the same elements in the same row-major order. A view changes L only. An op that cares about dims (a
broadcast, a reduction, a matmul) needs P to be a *grouping* of L: each dim of P is a run of adjacent dims
of L (size-1 dims of L belong nowhere), so that an op over logical dims is an op over whole Prism dims.
`groups(P, L)` finds that grouping; `broadcast_form` is an operand's shape in the grouping of the value it
broadcasts against. Where no grouping exists the lowering says so (UnsupportedOp), and the cone stays with
torch.

Inputs are views of FX values: a `Source` names the node and the steps torch takes to make the input
(reshape, permute, expand, a slice, a cast to the cone's dtype, a causal mask built from the query's shape, a boolean
mask made additive); `STEPS` is the one table of what
each step is in ATen, used both to run the steps on tensors and to put them into the FX graph.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from prism.ir import Tensor

__all__ = ["Pending", "STEPS", "Source", "Viewed", "broadcast_form", "groups", "refinement", "rows"]

aten = torch.ops.aten


def _causal(call: Callable[..., Any], x: Any, arg: tuple[int, ...]) -> Any:
    """The additive causal mask of `g` query groups of `s` rows over `t` keys, [1, ..., g·s, t] (as many leading
    1s as `rank` needs): row r (query position r mod s) sees keys j <= r mod s, as torch's is_causal does."""
    g, s, t, rank = arg
    like = x.meta["val"] if hasattr(x, "meta") else x   # an FX node's fake value, or the tensor
    mask = call(aten.full.default, [s, t], -math.inf, dtype=like.dtype, device=like.device)
    mask = call(aten.triu.default, mask, 1)
    if g > 1:
        mask = call(aten.repeat.default, mask, [g, 1])
    return call(aten.reshape.default, mask, [1] * (rank - 2) + [g * s, t])


STEPS: dict[str, Callable[[Callable[..., Any], Any, tuple[Any, ...]], Any]] = {
    "permute": lambda call, x, arg: call(aten.permute.default, x, list(arg)),
    "view": lambda call, x, arg: call(aten.reshape.default, x, list(arg)),     # copies only if it must
    "expand": lambda call, x, arg: call(aten.expand.default, x, list(arg)),
    "causal": _causal,
    "to": lambda call, x, arg: call(aten._to_copy.default, x, dtype=getattr(torch, arg[0])),
    "additive": lambda call, x, arg: call(aten.where.Scalar, x, 0.0, -math.inf),   # a boolean attention mask
    "slice": lambda call, x, arg: call(aten.slice.Tensor, x, *arg),                 # (dim, start, end)
}
"""Each kind of input step as ATen calls through `call(op, *args, **kwargs)`: the op applied to tensors, or a
node appended to an FX graph (prism.capture.backend); `x` is a tensor, or an FX node."""


@dataclass(frozen=True)
class Source:
    """A graph input: the value of FX node `node`, then each step of `steps`: (kind, argument), kinds from STEPS."""

    node: Any
    steps: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def then(self, kind: str, arg: tuple[Any, ...]) -> Source:
        return Source(self.node, self.steps + ((kind, tuple(arg)),))

    def apply(self, value: torch.Tensor) -> torch.Tensor:
        """The input's tensor for the node's `value`."""
        def call(op: Any, *args: Any, **kwargs: Any) -> Any:
            return op(*args, **kwargs)
        for kind, arg in self.steps:
            value = STEPS[kind](call, value, arg)
        return value

    def strides(self) -> tuple[int, ...] | None:
        """The strides of the input as the kernels are passed it (a `Linear`'s weight through its transpose is
        K-contiguous): the steps run on a tensor of the node's value's sizes and strides on the meta device. None
        where the node's value is not a tensor of known sizes."""
        val = self.node.meta.get("val") if hasattr(self.node, "meta") else None
        if not isinstance(val, torch.Tensor) or not all(isinstance(n, int) for n in (*val.shape, *val.stride())):
            return None
        return tuple(self.apply(torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")).stride())


@dataclass(frozen=True)
class Pending:
    """An input not yet used by a Prism op (so views can still be folded into it)."""

    source: Source
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Viewed:
    """An intermediate Prism tensor `t` seen through views: logical `shape`, `t`'s elements in the same order."""

    t: Tensor
    shape: tuple[int, ...]


def groups(p: Sequence[int], l: Sequence[int]) -> list[list[int]] | None:
    """For each dim of shape `p`, the adjacent dims of shape `l` it merges (dims of size 1 in `l` are in no
    group, a dim of size 1 in `p` merges none), or None if `p` is not such a grouping of `l`."""
    rest = [(i, n) for i, n in enumerate(l) if n != 1]
    out: list[list[int]] = []
    for n in p:
        group, size = [], 1
        while size < n and rest:
            i, m = rest.pop(0)
            group.append(i)
            size *= m
        if size != n:
            return None
        out.append(group)
    return out if not rest else None


def refinement(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The coarsest shape that both `a` and `b` group (prism.capture.views.groups), dims of size 1 left out: the
    pieces between the running products of either's dims ([2, 4, 8] and [2, 2, 16]: [2, 2, 2, 8]). None where
    there is none: a dim of one ends inside a piece that the other does not split there ([2, 3] and [3, 2])."""
    if math.prod(a) != math.prod(b):
        return None
    bounds = sorted({1} | {p for s in (a, b) for p in itertools.accumulate((n for n in s if n != 1), operator.mul)})
    if any(hi % lo for lo, hi in zip(bounds, bounds[1:])):
        return None
    return tuple(hi // lo for lo, hi in zip(bounds, bounds[1:]))


def broadcast_form(operand: Sequence[int], full: Sequence[int], grouping: list[list[int]]) -> tuple[int, ...] | None:
    """The shape, in `grouping` (of `full`'s dims), of an operand of logical shape `operand` broadcast against
    `full` (right-aligned, as torch does): per group, the group's size where the operand has all its dims,
    1 where it has none; None where it has some (no Prism broadcast reads that)."""
    ops = (1,) * (len(full) - len(operand)) + tuple(operand)
    out = []
    for group in grouping:
        have = [ops[i] == full[i] for i in group]
        if all(have):
            out.append(math.prod(full[i] for i in group))
        elif not any(have):
            out.append(1)
        else:
            return None
    return tuple(out)


def rows(shape: Sequence[int]) -> tuple[int, ...]:
    """`shape` with every dim but the last merged: how a [batch, seq, hidden] activation enters a row-wise cone."""
    return (math.prod(shape[:-1]), shape[-1]) if len(shape) > 2 else tuple(shape)
