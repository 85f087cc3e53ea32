"""The table of ATen ops Prism lowers (`ATEN`, filled by the rule modules through `aten_op`) and what every rule
works with: the `Lowering` being built (the kernel graph, each FX node's value, the inputs made so far), and the
helpers rules share (torch's broadcasting over Prism dims, a view folded into a pending input, softmax).

Two rule modules register into the table: prism.capture.lower (element-wise ops, reductions, norms, matmuls,
views and slices; it also walks a graph through the table) and prism.capture.sdpa (attention). Both import this
module and neither imports the other's rules, so adding a family of ops is one more module here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from prism.capture.views import Pending, Source, Viewed, broadcast_form, groups, refinement, rows
from prism.errors import UnsupportedOp
from prism.ir import KernelGraph, Tensor
from prism.ir.ops import TORCH_DTYPES, op

__all__ = ["ATEN", "Deferred", "Handler", "Lowering", "Size", "Unavailable", "Value", "aten_op", "broadcast", "fold", "op_name",
           "ranked", "reheld", "softmax", "static_size", "where", "wrap"]

@dataclass(frozen=True)
class Deferred:
    """rsqrt(y) or sigmoid(x): Prism has them only inside x * rsqrt(y) and x * sigmoid(x)."""

    kind: str
    arg: Any
    node: Any


Value = Any
"""What a node lowers to: a Tensor, a Viewed tensor, a Pending input, a Deferred factor, a Python scalar, or a
tuple of these (an op with several results)."""


def op_name(node: Any) -> str:
    """`aten.mm.default` for an OpOverload target, the function's name otherwise."""
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


_PRISM = str(Path(__file__).resolve().parents[1])


def where(node: Any) -> str:
    """The user's source line of `node`, as torch recorded it (the innermost frame outside Prism), or the
    place the captured function was defined (`node.meta["prism_origin"]`, set by the capture)."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    lines = [t.strip() for t in trace if t.strip().startswith("File ") and _PRISM not in t]
    origin = lines[-1] if lines else node.meta.get("prism_origin")
    return f" ({origin})" if origin else ""


Size = Callable[[Any], int]
"""A size as an int: an int as it is, a symbolic size (torch.SymInt) at the sizes being lowered for."""


def static_size(n: Any) -> int:
    """The sizes of a graph with static shapes: a symbolic one is refused (prism.capture.dynamic binds them)."""
    if isinstance(n, int):
        return n
    raise UnsupportedOp(f"a symbolic size {n} (dynamic shapes) where static sizes were expected")


@dataclass
class Lowering:
    """The kernel graph being built, the Prism value of each FX node, and the inputs made so far. With
    `as_rows`, inputs of rank 3 or more enter as rows where the op allows (prism.capture.views.rows).
    `size` turns the sizes in the FX graph's metadata into ints (symbolic ones at the sizes lowered for)."""

    graph: KernelGraph = field(default_factory=KernelGraph)
    values: dict[Any, Any] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    names: dict[Any, str] = field(default_factory=dict)  # preferred input names by FX node
    as_rows: bool = False
    size: Size = static_size
    dtype: torch.dtype | None = None  # the cone's dtype: every input is loaded as it (see `input`)
    _made: dict[Source, Tensor] = field(default_factory=dict)
    _sliced: dict[tuple, Tensor] = field(default_factory=dict)  # prism.capture.lower._slice's, by (ref, dim, range)
    _reheld: dict[tuple, Tensor] = field(default_factory=dict)  # `reheld`'s, by (ref, shape)
    node: Any = None  # the node being lowered, for messages

    def fail(self, why: str, operand: Value = None) -> UnsupportedOp:
        """The error for the node being lowered; with `operand`, it names the node that made that value as the
        place to cut (the backend leaves it, and what it depends on, to torch: prism.capture.backend)."""
        e = UnsupportedOp(f"{op_name(self.node)}: {why}{where(self.node)}")
        e.node = next((n for n, v in self.values.items() if v is operand), None) if operand is not None else None
        return e

    def input(self, v: Pending) -> Tensor:
        """The graph input for pending `v`, made on first use. Prism's ops take operands of one dtype: an input
        of another float dtype is cast to the cone's by torch first (a float32 value in a float16 cone is
        mostly an upcast of float16 data, cut from a norm, so the cast back is exact)."""
        if self.dtype is not None and v.dtype != self.dtype and v.dtype.is_floating_point:
            v = Pending(v.source.then("to", (str(self.dtype).removeprefix("torch."),)), v.shape, self.dtype)
        if v.source not in self._made:
            base = self.names.get(v.source.node) or getattr(v.source.node, "name", "in")
            name = "".join(c if c.isalnum() else "_" for c in base).strip("_") or "in"
            name = f"in_{name}" if not name[0].isalpha() else name
            taken = {t.name for t in self.graph.inputs}
            unique, k = name, 1
            while unique in taken or unique[0] == "t" and unique[1:].isdigit():
                k += 1
                unique = f"{name}_{k}"
            dtype = str(v.dtype).removeprefix("torch.")
            self._made[v.source] = self.graph.input(v.shape, dtype, unique)
            self.sources.append(v.source)
        return self._made[v.source]

    def input_then(self, t: Tensor, shape: Sequence[int], *steps: tuple[str, tuple[Any, ...]]) -> Tensor:
        """The graph input that is graph input `t` after input `steps` more, of `shape`: a slice or a reshape
        of a computed value pushed back to the inputs it reads."""
        source = next(s for s, made in self._made.items() if made is t)
        for kind, arg in steps:
            source = source.then(kind, arg)
        return self.input(Pending(source, tuple(shape), TORCH_DTYPES[t.dtype]))

    def tensor(self, v: Value) -> Tensor:
        """`v` as a Prism tensor of its logical shape (an input made of a pending one)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, Pending):
            return self.input(v)
        if isinstance(v, Viewed):
            raise self.fail(f"a view of an intermediate to {list(v.shape)} ({v.t.name} is {list(v.t.shape)}), "
                            "where this op needs its operand's own shape")
        if isinstance(v, Deferred):
            raise self.fail(f"{v.kind} is supported only as a factor: x * {v.kind}(...)")
        raise self.fail(f"expected a tensor, got {type(v).__name__} {v!r}")

    def held(self, v: Value, want: tuple[int, ...], why: Callable[[Tensor], str]) -> Tensor:
        """`v` as a Prism tensor of shape `want`: an input viewed to it, an intermediate only where it is held so
        already; else the error `why(its tensor)` says."""
        if isinstance(v, Pending):
            return self.input(fold(v, ("view", want), want))
        w = self.value(v)
        t = w.t if isinstance(w, Viewed) else w
        if tuple(t.shape) != tuple(want):
            raise self.fail(why(t))
        return t

    def value(self, v: Value) -> Tensor | Viewed:
        """`v` as a Prism tensor, possibly seen through views (an input enters as rows under `as_rows`)."""
        if isinstance(v, Pending) and self.as_rows and rows(v.shape) != v.shape:
            return wrap(self.input(fold(v, ("view", rows(v.shape)), rows(v.shape))), v.shape)
        return v if isinstance(v, Viewed) else self.tensor(v)

    def grouped(self, v: Value) -> tuple[Tensor, tuple[int, ...], list[list[int]]]:
        """`v`'s Prism tensor, its logical shape and the grouping of the one in the other."""
        v = self.value(v)
        t, shape = (v.t, v.shape) if isinstance(v, Viewed) else (v, v.shape)
        found = groups(t.shape, shape)
        if found is None:
            raise self.fail(f"a view of an intermediate to {list(shape)} that splits a dim of {t.name} "
                            f"{list(t.shape)}; Prism views intermediates only by merging or splitting whole dims")
        return t, shape, found

    def dim(self, v: Value, d: int) -> tuple[Tensor, tuple[int, ...], int | None]:
        """`v`'s tensor, its logical shape, and the Prism dim that is logical dim `d` alone (None: `d` has size 1,
        so an op over it changes nothing)."""
        t, shape, found = self.grouped(v)
        if shape[d] == 1:
            return t, shape, None
        (k,) = [k for k, g in enumerate(found) if d in g]
        if found[k] != [d]:
            raise self.fail(f"an op over dim {d} of {list(shape)}, which a view merged into dim {k} of {t.name} "
                            f"{list(t.shape)}")
        return t, shape, k

    def sizes(self, shape: Sequence[Any]) -> tuple[int, ...]:
        """A shape from the FX graph's metadata, as ints."""
        return tuple(self.size(n) for n in shape)

    def shape(self, v: Value) -> tuple[int, ...]:
        """The logical shape of `v`."""
        return v.shape if isinstance(v, (Tensor, Pending, Viewed)) else self.tensor(v).shape


def reheld(lw: Lowering, t: Tensor, want: Sequence[int]) -> Tensor:
    """Tensor `t` as a Prism tensor of shape `want` of as many elements, in the same row-major order (a reshape).
    Prism has no reshape, but an element-wise op computes each element where it sits, so the ops that make `t`
    are made again at `want`, down to the inputs, where it is one more view (a `Source` step), as
    `prism.capture.lower._slice` pushes a slice back: each operand is held alike, or, where the op broadcasts
    it, in the form it takes at `want` (an input with none is expanded by torch first). So grouped-query
    attention reads its query after RoPE (torch's rotation and the element-wise ops on an input, [b, hq, s, e])
    as [b, hk, g·s, e]. A value on the way that is neither (a norm of each head before RoPE) raises
    UnsupportedOp saying which; the caller cuts the cone at `t` then, as it did before (a norm, RoPE and
    attention in one cone would also be more than a search finishes). The ops at `t`'s own shape stay, pruned
    where nothing else reads them."""
    want = tuple(want)
    if tuple(t.shape) == want:
        return t
    key = (t.ref, want)
    if key not in lw._reheld:
        lw._reheld[key] = _remade(lw, t, want)
    return lw._reheld[key]


def _remade(lw: Lowering, t: Tensor, want: tuple[int, ...]) -> Tensor:
    g, node = lw.graph, lw.graph.nodes[t.node]
    if node.op == "input":
        return lw.input_then(t, want, ("view", want))
    if not op(node.op).family.elementwise:
        raise _unheld(t, f"it is computed by {node.op}, which Prism computes at its own shape only")
    return g.apply(node.op, [_operand_at(lw, g.tensor(r), tuple(t.shape), want) for r in node.inputs], node.attrs)


def _operand_at(lw: Lowering, x: Tensor, full: tuple[int, ...], want: tuple[int, ...]) -> Tensor:
    """Operand `x` of an element-wise op whose result, of shape `full`, is remade at `want`: in the form a
    broadcast reads it there (its dims that `full` splits or merges, at 1 where it broadcasts), or an input
    expanded to `full` by torch where it has none."""
    if tuple(x.shape) == full:
        return reheld(lw, x, want)
    pieces = refinement(full, want)
    if pieces is None:
        raise _unheld(x, f"no finer shape groups both {list(full)} and {list(want)}")
    mine = [1] * len(pieces)
    for d, group in enumerate(groups(full, pieces)):  # type: ignore[arg-type]  (a refinement groups both)
        for i in group:
            mine[i] = pieces[i] if x.shape[d] == full[d] else 1
    form = broadcast_form(mine, pieces, groups(want, pieces))  # type: ignore[arg-type]
    if form is not None:
        return reheld(lw, x, form)
    if lw.graph.nodes[x.node].op != "input":
        raise _unheld(x, f"it broadcasts against {list(full)}, and no Prism broadcast reads it as {list(want)}")
    return lw.input_then(x, want, ("expand", full), ("view", want))


def _unheld(t: Tensor, why: str) -> UnsupportedOp:
    return UnsupportedOp(f"{t.name} {list(t.shape)} cannot be computed at that shape: {why}")


def wrap(t: Tensor, shape: tuple[int, ...]) -> Tensor | Viewed:
    """Tensor `t` seen with logical `shape` (the same elements in the same order)."""
    return t if tuple(t.shape) == tuple(shape) else Viewed(t, tuple(shape))


def fold(v: Pending, step: tuple[str, tuple[int, ...]], shape: tuple[int, ...]) -> Pending:
    return Pending(v.source.then(*step), tuple(shape), v.dtype)


Handler = Callable[..., Any]
ATEN: dict[str, Handler] = {}


def aten_op(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for the ATen ops `names` (how prism.capture.sdpa adds its own)."""
    def register(fn: Handler) -> Handler:
        for n in names:
            ATEN[n] = fn
        return fn
    return register



def broadcast(lw: Lowering, name: str, a: Value, b: Value) -> Tensor | Viewed:
    """Binary table op `name` between two tensor values, broadcasting as torch does. The operand that has the
    result's logical shape (an intermediate if both do) fixes the Prism dims; the other is read in its
    grouping: a pending input viewed to fit, an intermediate only if it already does."""
    sa, sb = lw.shape(a), lw.shape(b)
    try:
        full = tuple(torch.broadcast_shapes(sa, sb))
    except RuntimeError:
        raise lw.fail(f"cannot broadcast {list(sa)} with {list(sb)}") from None
    hosts = [v for v in (a, b) if lw.shape(v) == full]
    if not hosts:  # both broadcast (a column against a row): only between operands of one rank, viewed as is
        if len(sa) != len(sb):
            a, b = (ranked(lw, a, len(sb)), b) if len(sa) < len(sb) else (a, ranked(lw, b, len(sa)))
        return getattr(lw.graph, name)(lw.tensor(a), lw.tensor(b))
    host = next((v for v in hosts if not isinstance(v, Pending)), hosts[0])
    other = b if host is a else a
    t, _, grouping = lw.grouped(host)
    want = broadcast_form(lw.shape(other), full, grouping)
    if want is None and isinstance(other, Pending):   # an input: torch expands it over the merged dims it lacks
        other = _expanded(other, full, grouping)
        want = broadcast_form(other.shape, full, grouping)
    if want is None:
        raise lw.fail(f"broadcasts {list(lw.shape(other))} against {list(full)}, which {t.name} holds as "
                      f"{list(t.shape)}: no Prism broadcast reads that")
    o = lw.held(other, want, lambda o: f"operands {list(t.shape)} and {list(o.shape)} hold {list(full)} and "
                                       f"{list(lw.shape(other))} in different Prism dims")
    x, y = (t, o) if host is a else (o, t)
    return wrap(getattr(lw.graph, name)(x, y), full)


def _expanded(v: Pending, full: tuple[int, ...], grouping: list[list[int]]) -> Pending:
    """Input `v` (broadcast against `full`) expanded, by an input step, to the whole of every group of `full`'s
    dims that it has some dims of: an ALiBi bias [heads, 1, keys] against scores held with batch and heads
    merged. The input then holds as many copies as the group has (a bias: a few KB), each read where torch's
    broadcast reads it."""
    shape = (1,) * (len(full) - len(v.shape)) + tuple(v.shape)
    if shape != v.shape:
        v = fold(v, ("view", shape), shape)
    out = list(shape)
    for group in grouping:
        if any(shape[i] == full[i] for i in group):
            for i in group:
                out[i] = full[i]
    return fold(v, ("expand", tuple(out)), tuple(out))


def ranked(lw: Lowering, v: Value, rank: int) -> Value:
    """Pending `v` with size-1 dims in front up to `rank` (torch's broadcast between ranks)."""
    if not isinstance(v, Pending):
        raise lw.fail(f"broadcasts a rank-{len(lw.shape(v))} intermediate against rank {rank}; Prism "
                      "broadcasts between equal ranks (inputs can be viewed, intermediates cannot)")
    shape = (1,) * (rank - len(v.shape)) + v.shape
    return fold(v, ("view", shape), shape)


def softmax(g: KernelGraph, x: Tensor, dim: int) -> Tensor:
    """exp(x - max x) / sum(exp(x - max x)) over `dim`."""
    e = g.exp(g.sub(x, g.max(x, dim)))
    return g.div(e, g.sum(e, dim))


@dataclass(frozen=True)
class Unavailable:
    """A result of a multi-result op that Prism does not compute (read it and the cone stays with torch)."""

    what: str
