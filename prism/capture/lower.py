"""ATen graphs (torch.fx, as torch.export or make_fx trace them) → Prism kernel graphs, one table of ops.

Each ATen op that Prism can express has one entry in `ATEN`: a function from the op's arguments (already
lowered) to a Prism value. What Prism cannot do on intermediate tensors (transpose, reshape, broadcasting
between ranks) it can often do on inputs: the kernels take strided inputs, so a view of a graph input
(`permute`, or a `view` that adds size-1 dims) becomes an input of its own, recorded as a `Source` (the
FX node and the views to apply to its value). Views that change nothing (same shape, no permutation) and
dtype casts are identities: Prism computes in float32 whatever the storage dtype. Two ATen spellings
are recognised as the Prism op they decompose: `x * rsqrt(y)` is `x / sqrt(y)`, `x * sigmoid(x)` is
`silu(x)`. Anything else raises `UnsupportedOp`, naming the op and, where torch recorded it, the line.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from prism.errors import GraphError, UnsupportedOp
from prism.ir import KernelGraph, Tensor

__all__ = ["ATEN", "Lowering", "Source", "lower", "op_name"]


@dataclass(frozen=True)
class Source:
    """A graph input: the value of FX node `node`, then each view step: ("permute", dims) or ("view", shape)."""

    node: Any
    steps: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def apply(self, value: torch.Tensor) -> torch.Tensor:
        for kind, arg in self.steps:
            value = value.permute(arg) if kind == "permute" else value.view(arg)
        return value


@dataclass(frozen=True)
class _Pending:
    """An input not yet used by a Prism op (so views can still be folded into it)."""

    source: Source
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class _Deferred:
    """rsqrt(y) or sigmoid(x): Prism has them only inside x * rsqrt(y) and x * sigmoid(x)."""

    kind: str
    arg: Any
    node: Any


def op_name(node: Any) -> str:
    """`aten.mm.default` for an OpOverload target, the function's name otherwise."""
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


_PRISM = str(Path(__file__).resolve().parents[1])


def _where(node: Any) -> str:
    """The user's source line of `node`, as torch recorded it (the innermost frame outside Prism), or the
    place the captured function was defined (`node.meta["prism_origin"]`, set by the capture)."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    lines = [t.strip() for t in trace if t.strip().startswith("File ") and _PRISM not in t]
    origin = lines[-1] if lines else node.meta.get("prism_origin")
    return f" ({origin})" if origin else ""


@dataclass
class Lowering:
    """The kernel graph being built, the Prism value of each FX node, and the inputs made so far."""

    graph: KernelGraph = field(default_factory=KernelGraph)
    values: dict[Any, Any] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    names: dict[Any, str] = field(default_factory=dict)  # preferred input names by FX node
    _made: dict[Source, Tensor] = field(default_factory=dict)
    node: Any = None  # the node being lowered, for messages

    def fail(self, why: str) -> UnsupportedOp:
        return UnsupportedOp(f"{op_name(self.node)}: {why}{_where(self.node)}")

    def tensor(self, v: Any) -> Tensor:
        """`v` as a Prism tensor, making a graph input of a pending one."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, _Pending):
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
        if isinstance(v, _Deferred):
            raise self.fail(f"{v.kind} is supported only as a factor: x * {v.kind}(...)")
        raise self.fail(f"expected a tensor, got {type(v).__name__} {v!r}")

    def shape(self, v: Any) -> tuple[int, ...]:
        return v.shape if isinstance(v, (Tensor, _Pending)) else self.tensor(v).shape


# ---- the table ---------------------------------------------------------------------------------

Handler = Callable[..., Any]
ATEN: dict[str, Handler] = {}


def _op(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for n in names:
            ATEN[n] = fn
        return fn
    return register


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_rank(lw: Lowering, a: Any, b: Any) -> tuple[Any, Any]:
    """Broadcast between ranks as torch does (size-1 leading dims), on inputs only."""
    ra, rb = len(lw.shape(a)), len(lw.shape(b))
    if ra == rb:
        return a, b
    low, high = (a, b) if ra < rb else (b, a)
    if not isinstance(low, _Pending):
        raise lw.fail(f"broadcasts a rank-{min(ra, rb)} intermediate against rank {max(ra, rb)}; Prism "
                      "broadcasts between equal ranks (inputs can be viewed, intermediates cannot)")
    shape = (1,) * abs(ra - rb) + low.shape
    low = _Pending(Source(low.source.node, low.source.steps + (("view", shape),)), shape, low.dtype)
    return (low, high) if ra < rb else (high, low)


def _binary(name: str, scalar: Callable[[KernelGraph, Tensor, float], Tensor] | None = None) -> Handler:
    def lower(lw: Lowering, a: Any, b: Any, alpha: Any = 1) -> Any:
        if alpha != 1:
            raise lw.fail(f"alpha={alpha} is not supported")
        if _scalar(a) and _scalar(b):
            return {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}[name](a, b)
        if _scalar(b) or _scalar(a):
            if scalar is None:
                raise lw.fail("a scalar operand here is not supported")
            return scalar(lw.graph, lw.tensor(a if _scalar(b) else b), b if _scalar(b) else a, _scalar(a))
        if name == "mul":
            for x, y in ((a, b), (b, a)):
                if isinstance(y, _Deferred) and y.kind == "rsqrt":           # x * rsqrt(v) = x / sqrt(v)
                    x, v = _same_rank(lw, x, y.arg)
                    return lw.graph.div(lw.tensor(x), lw.graph.sqrt(lw.tensor(v)))
                if isinstance(y, _Deferred) and y.kind == "sigmoid" and y.arg is x:  # x * sigmoid(x) = silu(x)
                    return lw.graph.silu(lw.tensor(x))
        a, b = _same_rank(lw, a, b)
        return getattr(lw.graph, name)(lw.tensor(a), lw.tensor(b))
    return lower


def _add_scalar(g: KernelGraph, t: Tensor, c: float, scalar_first: bool) -> Tensor:
    return g.add_scalar(t, c)


def _sub_scalar(g: KernelGraph, t: Tensor, c: float, scalar_first: bool) -> Tensor:
    return g.add_scalar(g.neg(t), c) if scalar_first else g.add_scalar(t, -c)


def _mul_scalar(g: KernelGraph, t: Tensor, c: float, scalar_first: bool) -> Tensor:
    return g.mul_scalar(t, c)


def _div_scalar(g: KernelGraph, t: Tensor, c: float, scalar_first: bool) -> Tensor:
    if scalar_first:
        raise UnsupportedOp(f"{c} / tensor (a reciprocal) is not a Prism op")
    return g.mul_scalar(t, 1.0 / c)


_op("aten.add.Tensor", "aten.add.Scalar")(_binary("add", _add_scalar))
_op("aten.sub.Tensor", "aten.sub.Scalar")(_binary("sub", _sub_scalar))
_op("aten.mul.Tensor", "aten.mul.Scalar")(_binary("mul", _mul_scalar))
_op("aten.div.Tensor", "aten.div.Scalar")(_binary("div", _div_scalar))
_op("aten.maximum.default")(_binary("maximum"))


@_op("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(lw: Lowering, a: Any, b: Any, alpha: Any = 1) -> Any:
    return _binary("sub", _sub_scalar)(lw, b, a, alpha)


for _name in ("exp", "relu", "sqrt", "neg", "silu"):
    def _unary(lw: Lowering, a: Any, _name: str = _name) -> Tensor:
        return getattr(lw.graph, _name)(lw.tensor(a))
    _op(f"aten.{_name}.default")(_unary)


@_op("aten.square.default")
def _square(lw: Lowering, a: Any) -> Tensor:
    return lw.graph.square(lw.tensor(a))


@_op("aten.gelu.default")
def _gelu(lw: Lowering, a: Any, approximate: str = "none") -> Tensor:
    if approximate != "none":
        raise lw.fail(f"gelu(approximate={approximate!r}); Prism's gelu is the exact (erf) form")
    return lw.graph.gelu(lw.tensor(a))


@_op("aten.rsqrt.default")
def _rsqrt(lw: Lowering, a: Any) -> _Deferred:
    return _Deferred("rsqrt", a, lw.node)


@_op("aten.sigmoid.default")
def _sigmoid(lw: Lowering, a: Any) -> _Deferred:
    return _Deferred("sigmoid", a, lw.node)


@_op("aten.pow.Tensor_Scalar")
def _pow(lw: Lowering, a: Any, p: Any) -> Any:
    if p == 2:
        return lw.graph.square(lw.tensor(a))
    if p == 0.5:
        return lw.graph.sqrt(lw.tensor(a))
    if p == -0.5:
        return _Deferred("rsqrt", a, lw.node)
    if p == 1:
        return a
    raise lw.fail(f"x ** {p}: Prism has x ** 2 and square roots")


def _dims(lw: Lowering, a: Any, dims: Any) -> list[int]:
    rank = len(lw.shape(a))
    dims = [dims] if isinstance(dims, int) else list(dims or range(rank))
    return sorted({d % rank for d in dims})


@_op("aten.sum.dim_IntList", "aten.mean.dim")
def _reduce(lw: Lowering, a: Any, dims: Any, keepdim: bool = False, dtype: Any = None) -> Tensor:
    if not keepdim:
        raise lw.fail("a reduction without keepdim=True changes the rank, which Prism cannot express")
    t = lw.tensor(a)
    n = 1
    for d in _dims(lw, a, dims):
        n *= t.shape[d]
        t = lw.graph.sum(t, d)
    return lw.graph.mul_scalar(t, 1.0 / n) if op_name(lw.node).startswith("aten.mean") else t


@_op("aten.amax.default")
def _amax(lw: Lowering, a: Any, dims: Any = (), keepdim: bool = False) -> Tensor:
    if not keepdim:
        raise lw.fail("a reduction without keepdim=True changes the rank, which Prism cannot express")
    t = lw.tensor(a)
    for d in _dims(lw, a, dims):
        t = lw.graph.max(t, d)
    return t


@_op("aten._softmax.default", "aten.softmax.int")
def _softmax(lw: Lowering, a: Any, dim: int, half_to_float: Any = None) -> Tensor:
    """torch's softmax, max subtracted first (exp never exceeds 1)."""
    x = lw.tensor(a)
    dim %= len(x.shape)
    e = lw.graph.exp(lw.graph.sub(x, lw.graph.max(x, dim)))
    return lw.graph.div(e, lw.graph.sum(e, dim))


@_op("aten.rms_norm.default")
def _rms_norm(lw: Lowering, a: Any, shape: Any, weight: Any = None, eps: Any = None) -> Tensor:
    if len(shape) != 1:
        raise lw.fail(f"rms_norm over {len(shape)} dims; Prism normalises over the last dim")
    x = lw.tensor(a)
    out = lw.graph.rms_norm(x, float(eps) if eps is not None else torch.finfo(torch.float32).eps)
    return out if weight is None else _binary("mul")(lw, out, weight)


@_op("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(lw: Lowering, a: Any, b: Any) -> Tensor:
    if len(lw.shape(a)) != len(lw.shape(b)):
        raise lw.fail("a matmul between ranks; Prism multiplies tensors of equal rank")
    return lw.graph.matmul(lw.tensor(a), lw.tensor(b))


def _transposed(lw: Lowering, w: Any) -> Any:
    if not isinstance(w, _Pending) or len(w.shape) != 2:
        raise lw.fail("a transposed weight must be a 2-D input (Prism cannot transpose an intermediate)")
    return _view(lw, w, ("permute", (1, 0)), (w.shape[1], w.shape[0]))


@_op("aten.linear.default")
def _linear(lw: Lowering, x: Any, w: Any, bias: Any = None) -> Tensor:
    out = _matmul(lw, x, _transposed(lw, w))
    return out if bias is None else _binary("add")(lw, out, bias)


@_op("aten.addmm.default")
def _addmm(lw: Lowering, bias: Any, x: Any, w: Any, beta: Any = 1, alpha: Any = 1) -> Tensor:
    if beta != 1 or alpha != 1:
        raise lw.fail("addmm with beta or alpha other than 1")
    return _binary("add")(lw, _matmul(lw, x, w), bias)


def _view(lw: Lowering, a: Any, step: tuple[str, tuple[int, ...]], shape: tuple[int, ...]) -> Any:
    """A view: nothing if it changes nothing, folded into an input if `a` is one, else unsupported."""
    if tuple(shape) == tuple(lw.shape(a)) and (step[0] != "permute" or list(step[1]) == sorted(step[1])):
        return a
    if isinstance(a, _Pending):
        return _Pending(Source(a.source.node, a.source.steps + (step,)), tuple(shape), a.dtype)
    raise lw.fail(f"a view of an intermediate to {list(shape)}; Prism can view inputs only")


def _out_shape(lw: Lowering) -> tuple[int, ...]:
    return tuple(lw.node.meta["val"].shape)


@_op("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.expand.default",
     "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims")
def _reshape(lw: Lowering, a: Any, *args: Any) -> Any:
    shape = _out_shape(lw)
    if op_name(lw.node) == "aten.expand.default" and shape != tuple(lw.shape(a)):
        raise lw.fail(f"expand to {list(shape)} (a broadcast Prism does implicitly between equal ranks only)")
    return _view(lw, a, ("view", shape), shape)


@_op("aten.permute.default", "aten.t.default", "aten.transpose.int")
def _permute(lw: Lowering, a: Any, *args: Any) -> Any:
    rank = len(lw.shape(a))
    name = op_name(lw.node)
    if name == "aten.permute.default":
        dims = tuple(d % rank for d in args[0])
    else:
        i, j = ((0, 1) if name == "aten.t.default" else (args[0] % rank, args[1] % rank))
        dims = list(range(rank))
        dims[i], dims[j] = dims[j], dims[i]
        dims = tuple(dims)
    return _view(lw, a, ("permute", dims), _out_shape(lw))


@_op("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.contiguous.default",
     "aten.to.dtype", "aten._to_copy.default", "aten.type_as.default", "aten.lift_fresh_copy.default")
def _identity(lw: Lowering, a: Any, *args: Any, **kwargs: Any) -> Any:
    return a  # a copy or a cast: Prism computes in float32 and stores in the graph's dtype


IGNORED = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default"}
"""Ops that check, not compute: skipped."""


# ---- lowering a graph ----------------------------------------------------------------------------

def lower(nodes: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
          names: dict[Any, str] | None = None) -> tuple[KernelGraph, list[Source]]:
    """The kernel graph computing `outputs` from `inputs` (FX nodes whose values the caller provides) through
    `nodes` (in topological order), and each graph input's Source; UnsupportedOp if an op is not Prism's.
    `names`: preferred graph-input names by input node (default: the nodes' names)."""
    lw = Lowering(names=dict(names or {}))
    for node in inputs:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOp(f"input {node.name} is not a tensor{_where(node)}")
        lw.values[node] = _Pending(Source(node), tuple(val.shape), val.dtype)
    for node in nodes:
        if node in lw.values:
            continue
        lw.node = node
        name = op_name(node)
        if name in IGNORED:
            continue
        handler = ATEN.get(name)
        if node.op != "call_function" or handler is None:
            raise UnsupportedOp(f"{name} is not a Prism op{_where(node)}")
        args = [_arg(lw, a) for a in node.args]
        kwargs = {k: _arg(lw, v) for k, v in node.kwargs.items() if k not in ("dtype", "memory_format", "layout",
                                                                                "device", "pin_memory", "non_blocking")}
        try:
            lw.values[node] = handler(lw, *args, **kwargs)
        except GraphError as e:  # Prism's builder refused (shapes, dtypes): the op as used here is not Prism's
            raise lw.fail(str(e)) from None
        except UnsupportedOp as e:
            raise e if _where(node) in str(e) or not _where(node) else UnsupportedOp(f"{e}{_where(node)}") from None
    outs = []
    for node in outputs:
        lw.node = node
        v = lw.values.get(node)
        if v is None:
            raise UnsupportedOp(f"output {node.name} is not computed by Prism ops")
        outs.append(lw.tensor(v) if not isinstance(v, _Pending) else _copy(lw, v))
    if not any(n.op == "call_function" for n in nodes if lw.values.get(n) is not None):
        raise UnsupportedOp("nothing to compute")
    lw.graph.output(*outs)
    return lw.graph, lw.sources


def _copy(lw: Lowering, v: _Pending) -> Tensor:
    """An output that is an input, unchanged: Prism outputs are computed tensors, so x * 1."""
    return lw.graph.mul_scalar(lw.tensor(v), 1.0)


def _arg(lw: Lowering, a: Any) -> Any:
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(lw, x) for x in a)
    if hasattr(a, "op") and hasattr(a, "meta"):  # an fx.Node
        if a not in lw.values:
            raise lw.fail(f"operand {a.name} is not computed by Prism ops")
        return lw.values[a]
    if isinstance(a, float) and not math.isfinite(a):
        raise lw.fail(f"constant {a}")
    return a
