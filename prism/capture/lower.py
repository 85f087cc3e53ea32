"""ATen graphs (torch.fx, as torch.export or make_fx trace them) → Prism kernel graphs: the rules of every op
but attention (prism.capture.sdpa), and `lower`, which walks a graph through the table both fill.

Each ATen op that Prism can express has one entry in the table (prism.capture.aten.ATEN): a function from the
op's arguments (already lowered) to a Prism value. Views are layout, never computed (prism.capture.views): a view of a graph input
(`permute`, `view`, `expand`) folds into the input, recorded as a `Source` (the FX node and the steps to apply
to its value); a view of an intermediate keeps the Prism tensor and changes its logical shape, and the ops
after it (broadcasts, reductions) work on whole groups of logical dims. A cone is lowered with its inputs
as they come, and if that fails, once more with every input of rank 3 or more entering as rows ([batch·seq,
hidden]: a norm computed on a 3-D activation before a `Linear`'s view to 2-D); the attempt that got further
names the reason. A slice (`slice`, `split`, `chunk`) of a computed value is pushed back to the inputs, where it is
one more view: a slice of a matmul's columns is the matmul with a slice of its weight (`_slice`). Dtype casts are identities: Prism loads every input in its own dtype, computes in float32
and rounds only where it stores, so an upcast (a norm computed in float32 in a float16 model) is exact and a
downcast inside a cone is dropped, as Inductor drops it by default (`emulate_precision_casts` off: a value
kept in float32 between two ops is closer to the exact result than eager's rounded one). Two ATen spellings are recognised as the Prism op they decompose:
`x * rsqrt(y)` is `x / sqrt(y)`, `x * sigmoid(x)` is `silu(x)`; so are the decompositions Inductor's table
gives silu and the exact gelu (`SPELLINGS`), which a graph with symbolic sizes reaches Prism in when
Inductor runs the rest. Anything else raises `UnsupportedOp`, naming the op and, where torch recorded it, the
line.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import Any, Callable, Sequence

import torch

from prism.capture import sdpa  # noqa: F401  (its rules register into the table: attention)
from prism.capture.aten import (ATEN, Deferred, Handler, Lowering, Size, Unavailable, Value, aten_op, broadcast, fold,
                                op_name, ranked, softmax, static_size, where, wrap)
from prism.capture.views import Pending, Source, Viewed, rows
from prism.errors import GraphError, UnsupportedOp
from prism.ir import KernelGraph, Tensor
from prism.ir.ops import MATMUL, MAX_REDUCE, REDUCE, ROWWISE, op

__all__ = ["IGNORED", "SAME_NAMED", "SOFTMAXES", "input_strides", "lower"]


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _map(lw: Lowering, v: Value, fn: Callable[[Tensor], Tensor]) -> Tensor | Viewed:
    """An element-wise op on `v`, whatever its views."""
    v = lw.value(v)
    return Viewed(fn(v.t), v.shape) if isinstance(v, Viewed) else fn(v)


def _binary(name: str, scalar: Callable[[KernelGraph, Tensor, float], Tensor] | None = None) -> Handler:
    def lower(lw: Lowering, a: Any, b: Any, alpha: Any = 1) -> Any:
        if alpha != 1:
            raise lw.fail(f"alpha={alpha} is not supported")
        if _scalar(a) and _scalar(b):
            return {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}[name](a, b)
        if _scalar(b) or _scalar(a):
            if scalar is None:
                raise lw.fail("a scalar operand here is not supported")
            c = b if _scalar(b) else a
            return _map(lw, a if _scalar(b) else b, lambda t: scalar(lw.graph, t, c, _scalar(a)))
        if name == "mul":
            for x, y in ((a, b), (b, a)):
                if isinstance(y, Deferred) and y.kind == "rsqrt":           # x * rsqrt(v) = x / sqrt(v)
                    return broadcast(lw, "div", x, _map(lw, y.arg, lw.graph.sqrt))
                if isinstance(y, Deferred) and y.kind == "sigmoid" and y.arg is x:  # x * sigmoid(x) = silu(x)
                    return _map(lw, x, lw.graph.silu)
        return broadcast(lw, name, a, b)
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


aten_op("aten.add.Tensor", "aten.add.Scalar")(_binary("add", _add_scalar))
aten_op("aten.sub.Tensor", "aten.sub.Scalar")(_binary("sub", _sub_scalar))
aten_op("aten.mul.Tensor", "aten.mul.Scalar")(_binary("mul", _mul_scalar))
aten_op("aten.div.Tensor", "aten.div.Scalar")(_binary("div", _div_scalar))
aten_op("aten.maximum.default")(_binary("maximum"))


@aten_op("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(lw: Lowering, a: Any, b: Any, alpha: Any = 1) -> Any:
    return _binary("sub", _sub_scalar)(lw, b, a, alpha)


SAME_NAMED = {f"aten.{name}.default": name for name in ("exp", "relu", "sqrt", "neg", "silu", "square", "erf")}
"""ATen ops that are the element-wise Prism op of the same name."""
for _aten, _name in SAME_NAMED.items():
    def _unary(lw: Lowering, a: Any, _name: str = _name) -> Tensor | Viewed:
        return _map(lw, a, getattr(lw.graph, _name))
    aten_op(_aten)(_unary)


def _tanh(g: KernelGraph, t: Tensor) -> Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1"""
    return g.add_scalar(g.mul_scalar(g.sigmoid(g.mul_scalar(t, 2.0)), 2.0), -1.0)


@aten_op("aten.tanh.default")
def _tanh_op(lw: Lowering, a: Any) -> Tensor | Viewed:
    return _map(lw, a, lambda t: _tanh(lw.graph, t))


@aten_op("aten.gelu.default")
def _gelu(lw: Lowering, a: Any, approximate: str = "none") -> Tensor | Viewed:
    """Both of torch's forms: the exact one is Prism's gelu; the tanh one is written out,
    x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))."""
    if approximate == "none":
        return _map(lw, a, lw.graph.gelu)
    if approximate != "tanh":
        raise lw.fail(f"gelu(approximate={approximate!r})")
    g = lw.graph

    def tanh_form(x: Tensor) -> Tensor:
        inner = g.mul_scalar(g.add(x, g.mul_scalar(g.mul(x, g.square(x)), 0.044715)), math.sqrt(2 / math.pi))
        return g.mul(g.mul_scalar(x, 0.5), g.add_scalar(_tanh(g, inner), 1.0))
    return _map(lw, a, tanh_form)


@aten_op("aten.rsqrt.default")
def _rsqrt(lw: Lowering, a: Any) -> Deferred:
    return Deferred("rsqrt", a, lw.node)


@aten_op("aten.sigmoid.default")
def _sigmoid(lw: Lowering, a: Any) -> Deferred:
    return Deferred("sigmoid", a, lw.node)


@aten_op("aten.pow.Tensor_Scalar")
def _pow(lw: Lowering, a: Any, p: Any) -> Any:
    g = lw.graph
    powers = {2: g.square, 0.5: g.sqrt, 3: lambda t: g.mul(t, g.square(t))}
    if p in powers:
        return _map(lw, a, powers[p])
    if p == -0.5:
        return Deferred("rsqrt", a, lw.node)
    if p == 1:
        return a
    raise lw.fail(f"x ** {p}: Prism has x ** 2, x ** 3 and square roots")


def _dims(lw: Lowering, a: Any, dims: Any) -> list[int]:
    rank = len(lw.shape(a))
    dims = [dims] if isinstance(dims, int) else list(dims or range(rank))
    return sorted({d % rank for d in dims})


def _reduced(lw: Lowering, a: Any, dims: Any, keepdim: bool, op: Callable[[Tensor, int], Tensor]) -> Tensor | Viewed:
    """Reduction `op` over logical `dims` of `a`; the dims stay as size 1 in the Prism tensor, and the logical
    shape drops them unless `keepdim`."""
    dims = _dims(lw, a, dims)
    v = a
    for d in dims:
        t, shape, k = lw.dim(v, d)
        out = list(shape)
        out[d] = 1
        v = wrap(t if k is None else op(t, k), tuple(out))
    return v if keepdim else _squeezed(lw, v, dims)


def _squeezed(lw: Lowering, v: Value, dims: Sequence[int]) -> Tensor | Viewed:
    """`v` without its logical `dims` (each of size 1); the Prism tensor is the same."""
    shape = tuple(n for d, n in enumerate(lw.shape(v)) if d not in dims)
    v = lw.value(v)
    return wrap(v.t if isinstance(v, Viewed) else v, shape)


@aten_op("aten.sum.dim_IntList", "aten.mean.dim")
def _reduce(lw: Lowering, a: Any, dims: Any, keepdim: bool = False, dtype: Any = None) -> Tensor | Viewed:
    n = math.prod(lw.shape(a)[d] for d in _dims(lw, a, dims))
    out = _reduced(lw, a, dims, keepdim, lw.graph.sum)
    return _map(lw, out, lambda t: lw.graph.mul_scalar(t, 1.0 / n)) if op_name(lw.node).startswith("aten.mean") else out


@aten_op("aten.var_mean.correction", "aten.var.correction")
def _var_mean(lw: Lowering, a: Any, dims: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> Tensor | Viewed | tuple:
    """Variance (Bessel's `correction`, 1 unless given) and, for var_mean, the mean: two passes, the mean
    first and the squares of the centred values summed, as layer_norm is written here (Inductor decomposes
    layer_norm to var_mean)."""
    dims = _dims(lw, a, dims)
    n = math.prod(lw.shape(a)[d] for d in dims)
    correction = 1 if correction is None else correction
    if n - correction <= 0:
        raise lw.fail(f"a variance of {n} value(s) with correction {correction} divides by {n - correction}")
    g = lw.graph
    mean = _map(lw, _reduced(lw, a, dims, True, g.sum), lambda t: g.mul_scalar(t, 1.0 / n))
    squares = _map(lw, broadcast(lw, "sub", a, mean), g.square)
    var = _map(lw, _reduced(lw, squares, dims, keepdim, g.sum), lambda t: g.mul_scalar(t, 1.0 / (n - correction)))
    if op_name(lw.node).startswith("aten.var."):
        return var
    return var, mean if keepdim else _squeezed(lw, mean, dims)


@aten_op("aten.var_mean.dim", "aten.var.dim")
def _var_mean_unbiased(lw: Lowering, a: Any, dims: Any = None, unbiased: bool = True,
                       keepdim: bool = False) -> Tensor | Viewed | tuple:
    """The older spelling: `unbiased` is a correction of 1, else 0."""
    return _var_mean(lw, a, dims, correction=int(unbiased), keepdim=keepdim)


@aten_op("aten.amax.default")
def _amax(lw: Lowering, a: Any, dims: Any = (), keepdim: bool = False) -> Tensor | Viewed:
    return _reduced(lw, a, dims, keepdim, lw.graph.max)


SOFTMAXES = ("aten._softmax.default", "aten.softmax.int")


@aten_op(*SOFTMAXES)
def _softmax(lw: Lowering, a: Any, dim: int, half_to_float: Any = None) -> Tensor | Viewed:
    """torch's softmax, max subtracted first (exp never exceeds 1)."""
    t, shape, k = lw.dim(a, dim % len(lw.shape(a)))
    if k is None:
        raise lw.fail("softmax over a dim of size 1")
    return wrap(softmax(lw.graph, t, k), shape)


@aten_op("aten.rms_norm.default")
def _rms_norm(lw: Lowering, a: Any, shape: Any, weight: Any = None, eps: Any = None) -> Tensor | Viewed:
    if len(shape) != 1:
        raise lw.fail(f"rms_norm over {len(shape)} dims; Prism normalises over the last dim")
    t, logical, k = lw.dim(a, len(lw.shape(a)) - 1)
    if k != len(t.shape) - 1:
        raise lw.fail(f"rms_norm over a dim that is not the last of {t.name} {list(t.shape)}")
    out = wrap(lw.graph.rms_norm(t, float(eps) if eps is not None else torch.finfo(torch.float32).eps), logical)
    return out if weight is None else broadcast(lw, "mul", out, weight)


@aten_op("aten.layer_norm.default")
def _layer_norm_op(lw: Lowering, a: Any, shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5,
                   cudnn_enable: Any = None) -> Tensor | Viewed:
    return _layer_norm(lw, a, shape, weight, bias, eps)[0]


@aten_op("aten.native_layer_norm.default")
def _layer_norm(lw: Lowering, a: Any, shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple:
    """(x - mean) / sqrt(var + eps) · weight + bias over the last dim, written with Prism's ops; its mean and
    rstd results (for autograd) are not Prism's."""
    if len(shape) != 1:
        raise lw.fail(f"layer_norm over {len(shape)} dims; Prism normalises over the last dim")
    last = len(lw.shape(a)) - 1
    t, logical, k = lw.dim(a, last)
    if k is None:
        raise lw.fail("layer_norm over a dim of size 1")
    g, n = lw.graph, t.shape[k]
    centred = g.sub(t, g.mul_scalar(g.sum(t, k), 1.0 / n))
    var = g.mul_scalar(g.sum(g.square(centred), k), 1.0 / n)
    out = wrap(g.div(centred, g.sqrt(g.add_scalar(var, float(eps)))), logical)
    if weight is not None:
        out = broadcast(lw, "mul", out, weight)
    if bias is not None:
        out = broadcast(lw, "add", out, bias)
    return out, Unavailable("layer_norm's mean"), Unavailable("layer_norm's rstd")


@aten_op("getitem")
def _getitem(lw: Lowering, a: Any, index: int) -> Any:
    if not isinstance(a, tuple):
        raise lw.fail(f"getitem of {type(a).__name__}")
    out = a[index]
    if isinstance(out, Unavailable):
        raise lw.fail(f"{out.what} is not computed by Prism")
    return out


@aten_op("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(lw: Lowering, a: Any, b: Any) -> Tensor | Viewed:
    """A matmul of equal ranks, or of a [..., in] activation with an [in, out] weight, multiplied as rows."""
    if len(lw.shape(a)) > 2 and len(lw.shape(b)) == 2:
        return _rows_matmul(lw, a, b)
    if len(lw.shape(a)) != len(lw.shape(b)):
        raise lw.fail("a matmul between ranks; Prism multiplies tensors of equal rank")
    return _unmerged_matmul(lw, a, b) or lw.graph.matmul(lw.tensor(a), lw.tensor(b))


def _unmerged_matmul(lw: Lowering, a: Any, b: Any) -> Tensor | Viewed | None:
    """A batched matmul whose operand is an intermediate viewed with its leading (batch) dims merged (eager
    attention's probabilities [b, h, s, t] viewed as [b·h, s, t] for `bmm`): the matmul over the unmerged batch
    dims, the other operand split alike (an input viewed so, or an intermediate held so), and the product seen
    merged again. None where neither operand is such a view."""
    for x, y in ((a, b), (b, a)):
        v = lw.value(x)
        if not isinstance(v, Viewed) or len(v.t.shape) <= len(v.shape) or v.t.shape[-2:] != v.shape[-2:] \
                or math.prod(v.t.shape[:-2]) != math.prod(v.shape[:-2]):
            continue
        want = tuple(v.t.shape[:-2]) + tuple(lw.shape(y)[-2:])
        other = lw.held(y, want, lambda o: f"a batched matmul of {v.t.name} {list(v.t.shape)} viewed as "
                                           f"{list(v.shape)} with {o.name} {list(o.shape)}: their batch dims are "
                                           "held differently")
        out = lw.graph.matmul(v.t, other) if x is a else lw.graph.matmul(other, v.t)
        return wrap(out, tuple(lw.shape(a)[:-1]) + (lw.shape(b)[-1],))
    return None


def _rows_matmul(lw: Lowering, x: Any, w: Any) -> Tensor | Viewed:
    """x [..., in] @ w [in, out] as [rows, in] @ [in, out], seen as [..., out]."""
    shape = lw.shape(x)
    flat = rows(shape)
    v = lw.value(_view(lw, x, ("view", flat), flat))
    if isinstance(v, Viewed):
        raise lw.fail(f"a matmul of {list(shape)}, held as {list(v.t.shape)}, not as rows")
    return wrap(lw.graph.matmul(v, lw.tensor(w)), shape[:-1] + (lw.shape(w)[1],))


def _transposed(lw: Lowering, w: Any) -> Any:
    if not isinstance(w, Pending) or len(w.shape) != 2:
        raise lw.fail("a transposed weight must be a 2-D input (Prism cannot transpose an intermediate)")
    return _view(lw, w, ("permute", (1, 0)), (w.shape[1], w.shape[0]))


@aten_op("aten.linear.default")
def _linear(lw: Lowering, x: Any, w: Any, bias: Any = None) -> Tensor | Viewed:
    """x @ w.T (+ bias); an x of rank 3 or more is multiplied as rows ([batch·seq, in] @ [in, out])."""
    out = _rows_matmul(lw, x, _transposed(lw, w))
    return out if bias is None else broadcast(lw, "add", out, bias)


@aten_op("aten.addmm.default")
def _addmm(lw: Lowering, bias: Any, x: Any, w: Any, beta: Any = 1, alpha: Any = 1) -> Tensor | Viewed:
    if beta != 1 or alpha != 1:
        raise lw.fail("addmm with beta or alpha other than 1")
    return broadcast(lw, "add", _matmul(lw, x, w), bias)


@aten_op("aten.baddbmm.default")
def _baddbmm(lw: Lowering, bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor | Viewed:
    """beta · bias + alpha · (a @ b), batched (BLOOM's scores: its ALiBi bias plus the scaled product)."""
    if not _scalar(beta) or not _scalar(alpha):
        raise lw.fail("baddbmm with a tensor beta or alpha")
    product = _matmul(lw, a, b)
    if alpha != 1:
        product = _map(lw, product, lambda t: lw.graph.mul_scalar(t, float(alpha)))
    if beta == 0:     # torch ignores the bias then (NaN in it included)
        return product
    if beta != 1:
        bias = _binary("mul", _mul_scalar)(lw, bias, float(beta))
    return broadcast(lw, "add", product, bias)


def _view(lw: Lowering, a: Any, step: tuple[str, tuple[int, ...]], shape: tuple[int, ...]) -> Any:
    """A view: nothing if it changes nothing, folded into an input if `a` is one, a new logical shape of an
    intermediate if it keeps the row-major order (a reshape), else unsupported."""
    shape = tuple(shape)
    same = list(step[1]) == sorted(step[1]) if step[0] == "permute" else True
    if shape == tuple(lw.shape(a)) and same:
        return a
    if isinstance(a, Pending):
        return fold(a, step, shape)
    if step[0] == "view" and math.prod(shape) == math.prod(lw.shape(a)) and not isinstance(a, (Deferred, tuple)):
        v = lw.value(a)
        return wrap(v.t if isinstance(v, Viewed) else v, shape)
    raise lw.fail(f"a {step[0]} of an intermediate to {list(shape)}; Prism can view inputs only")


def _out_shape(lw: Lowering) -> tuple[int, ...]:
    return lw.sizes(lw.node.meta["val"].shape)


@aten_op("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default",
     "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims")
def _reshape(lw: Lowering, a: Any, *args: Any) -> Any:
    return _view(lw, a, ("view", _out_shape(lw)), _out_shape(lw))


@aten_op("aten.expand.default")
def _expand(lw: Lowering, a: Any, *args: Any) -> Any:
    shape = _out_shape(lw)
    if shape != tuple(lw.shape(a)) and isinstance(a, Pending):
        if len(shape) != len(a.shape):
            a = ranked(lw, a, len(shape))
        return fold(a, ("expand", shape), shape)
    return _view(lw, a, ("expand", shape), shape)


def _permutation(name: str, args: tuple[Any, ...], rank: int) -> tuple[int, ...]:
    """The dims of a permute-like op `name` with its arguments after the tensor."""
    if name == "aten.permute.default":
        return tuple(d % rank for d in args[0])
    i, j = ((0, 1) if name == "aten.t.default" else (args[0] % rank, args[1] % rank))
    dims = list(range(rank))
    dims[i], dims[j] = dims[j], dims[i]
    return tuple(dims)


def _keeps_order(dims: tuple[int, ...], shape: tuple[Any, ...]) -> bool:
    """Whether permuting `shape` by `dims` keeps the row-major order of the elements: the dims of size other than
    1 stay in the same order (a decode step's [b, 1, h, d] → [b, h, 1, d]). A symbolic size counts as not 1."""
    kept = [d for d in dims if not (isinstance(shape[d], int) and shape[d] == 1)]
    return kept == sorted(kept)


@aten_op("aten.permute.default", "aten.t.default", "aten.transpose.int")
def _permute(lw: Lowering, a: Any, *args: Any) -> Any:
    dims = _permutation(op_name(lw.node), args, len(lw.shape(a)))
    if _keeps_order(dims, lw.shape(a)) and not isinstance(a, Pending):  # the order of elements stays
        return _view(lw, a, ("view", _out_shape(lw)), _out_shape(lw))
    return _view(lw, a, ("permute", dims), _out_shape(lw))


@aten_op("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.contiguous.default",
     "aten.to.dtype", "aten._to_copy.default", "aten.type_as.default", "aten.lift_fresh_copy.default",
     "prims.convert_element_type.default")
def _identity(lw: Lowering, a: Any, *args: Any, **kwargs: Any) -> Any:
    return a  # a copy or a cast: Prism computes in float32 and stores in the graph's dtype (module docstring)


# ---- slices: what a slice of a computed value reads --------------------------------------------------

def _narrow(lw: Lowering, a: Any, dim: int, start: Any, end: Any, step: Any = 1) -> Any:
    """`a[start:end]` along logical `dim` (torch's bounds: None, negative, past the end)."""
    shape = lw.shape(a)
    dim %= len(shape)
    n = shape[dim]
    start, end = (0 if start is None else lw.size(start)), (n if end is None else lw.size(end))
    start, end = (min(max(i + n if i < 0 else i, 0), n) for i in (start, end))
    if step != 1:
        raise lw.fail(f"a slice with step {step}")
    if (start, end) == (0, n):
        return a
    if end <= start:
        raise lw.fail(f"an empty slice [{start}:{end}] of dim {dim} of {list(shape)}")
    out = list(shape)
    out[dim] = end - start
    if isinstance(a, Pending):
        return fold(a, ("slice", (dim, start, end)), tuple(out))
    t, _, k = lw.dim(a, dim)
    return wrap(_slice(lw, t, k, start, end), tuple(out))


def _slice(lw: Lowering, t: Tensor, k: int, start: int, end: int) -> Tensor:
    """`t[start:end]` along Prism dim `k`, computed from slices of what `t` reads. Prism has no slice op, but a
    slice commutes with element-wise ops, with reductions and row-wise ops over other dims, and with a matmul
    (a slice of its columns is the product with a slice of B's columns; of its rows, of A's rows), down to
    the inputs, where it is one more view (a `Source` step). So a fused projection split in torch (Phi3's
    gate_up_proj, GPT-2's c_attn) becomes the projections it fuses, each a matmul with a slice of the
    weight; the unsliced value is left dead (`lower` prunes it)."""
    key = (t.ref, k, start, end)
    if key in lw._sliced:
        return lw._sliced[key]
    g, node = lw.graph, lw.graph.nodes[t.node]
    operands = [g.tensor(r) for r in node.inputs]

    def cut(x: Tensor, d: int = k) -> Tensor:
        return x if x.shape[d] == 1 else _slice(lw, x, d, start, end)

    if node.op == "input":
        shape = list(t.shape)
        shape[k] = end - start
        out = lw.input_then(t, shape, ("slice", (k, start, end)))
    elif not _slices_through(op(node.op).family, k, len(t.shape)):
        raise lw.fail(f"a slice of dim {k} of {t.name} {list(t.shape)}, computed by {node.op}, which a slice "
                      "does not commute with")
    elif op(node.op).family.contraction:
        a, b = operands
        rank = len(t.shape)
        out = g.matmul(a if k == rank - 1 else cut(a), b if k == rank - 2 else cut(b))
    else:
        out = g.apply(node.op, [cut(x) for x in operands], node.attrs)
    lw._sliced[key] = out
    return out


def _slices_through(family: Any, k: int, rank: int) -> bool:
    """Does a slice of dim `k` of the result commute with an op of `family` (the slice of its operands)?"""
    if family.elementwise or family in (MATMUL, REDUCE, MAX_REDUCE):  # a reduction's own dim has size 1: not sliced
        return True
    return family is ROWWISE and k != rank - 1   # a norm over the last dim


@aten_op("aten.slice.Tensor")
def _slice_op(lw: Lowering, a: Any, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Any:
    return _narrow(lw, a, dim, start, end, step)


@aten_op("aten.split.Tensor", "aten.split_with_sizes.default")
def _split(lw: Lowering, a: Any, sizes: Any, dim: int = 0) -> tuple:
    """torch's split (and chunk, which decomposes to it): pieces of `sizes` each, or of one size, the last
    one shorter."""
    n = lw.shape(a)[dim % len(lw.shape(a))]
    if not isinstance(sizes, (list, tuple)):
        step = lw.size(sizes)
        sizes = [min(step, n - i) for i in range(0, n, step)]
    bounds = list(itertools.accumulate([0] + [lw.size(m) for m in sizes]))
    return tuple(_narrow(lw, a, dim, i, j) for i, j in zip(bounds, bounds[1:]))


@aten_op("aten.chunk.default")
def _chunk(lw: Lowering, a: Any, chunks: int, dim: int = 0) -> tuple:
    """torch's chunk: pieces of ceil(n / chunks), the last one shorter."""
    return _split(lw, a, -(-lw.shape(a)[dim % len(lw.shape(a))] // chunks), dim)


IGNORED = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default"}
"""Ops that check, not compute: skipped."""


X = "x"
"""The operand of a spelling in `SPELLINGS`."""
SPELLINGS = (  # (the op Prism has whole, the ATen ops that spell it, as (op, operands...), X, or a constant)
    ("silu", ("aten.div.Tensor", X, ("aten.add.Tensor", ("aten.exp.default", ("aten.neg.default", X)), 1))),
    ("gelu", ("aten.mul.Tensor", ("aten.mul.Tensor", X, 0.5),
              ("aten.add.Tensor", ("aten.erf.default", ("aten.mul.Tensor", X, math.sqrt(0.5))), 1))),
    ("gelu", ("aten.mul.Tensor", ("aten.mul.Tensor", X, 0.5),
              ("aten.add.Tensor", ("aten.erf.default", ("aten.div.Tensor", X, math.sqrt(2))), 1))),
)
"""torch's decompositions of Prism ops (Inductor's table: silu as x / (1 + exp(-x)), the exact gelu through
erf; and the exact gelu as Python writes it, `x * 0.5 * (1 + erf(x / sqrt(2)))`), recognised whole where their
inner values are read by nothing else: a graph with symbolic sizes is decomposed before the backend sees it
when Inductor runs the rest, and the ops of the spelling, searched one by one, made a region's search several
times larger (Llama's MLP passed its time limit)."""
COMMUTATIVE = {"aten.add.Tensor", "aten.mul.Tensor"}


def _spelled(root: Any, within: set[Any], known: set[Any]) -> tuple[str, Any, set[Any]] | None:
    """(the Prism op, its operand's node, the nodes before `root` inside) where `root` ends a spelling of
    `SPELLINGS` whose inner nodes are all in `within` and read only inside it, and whose operand is in
    `known`; else None."""
    for name, pattern in SPELLINGS:
        bound: dict[str, Any] = {}
        inside: list[Any] = []
        if _matches(pattern, root, bound, inside, within):
            inner = set(inside) - {root}
            if bound[X] in known and all(set(n.users) <= set(inside) for n in inner):
                return name, bound[X], inner
    return None


def _matches(pattern: Any, arg: Any, bound: dict[str, Any], inside: list[Any], within: set[Any]) -> bool:
    """Whether `arg` is `pattern` (see SPELLINGS), binding X in `bound` and adding the op nodes to `inside`."""
    if pattern == X:
        if X in bound:
            return bound[X] is arg
        bound[X] = arg
        return isinstance(arg, torch.fx.Node)
    if not isinstance(pattern, tuple):
        return _scalar(arg) and math.isclose(arg, pattern, rel_tol=1e-9)
    if not isinstance(arg, torch.fx.Node) or arg not in within or op_name(arg) != pattern[0] or arg.kwargs:
        return False
    orders = [arg.args, arg.args[::-1]] if pattern[0] in COMMUTATIVE else [arg.args]
    for args in orders:
        b, i = dict(bound), []
        if len(args) == len(pattern) - 1 and all(_matches(p, a, b, i, within) for p, a in zip(pattern[1:], args)):
            bound.update(b)
            inside += [*i, arg]
            return True
    return False


# ---- lowering a graph ----------------------------------------------------------------------------

def input_strides(sources: Sequence[Source]) -> tuple[tuple[int, ...], ...] | None:
    """The strides a lowered program's inputs are passed with (`lower`'s sources, `Source.strides`): what its
    tuning reads them in (prism.options.TuneOptions.strides). None where one is not known."""
    strides = tuple(s.strides() for s in sources)
    return None if any(s is None for s in strides) else strides  # type: ignore[return-value]


def lower(nodes: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any], names: dict[Any, str] | None = None,
          size: Size = static_size) -> tuple[KernelGraph, list[Source], list[tuple[int, ...]]]:
    """The kernel graph computing `outputs` from `inputs` (FX nodes whose values the caller provides) through
    `nodes` (in topological order), each graph input's Source, and each output's logical shape (the graph's
    output holds it in the same row-major order, maybe with dims merged); UnsupportedOp if an op is not
    Prism's. `names`: preferred graph-input names by input node (default: the nodes' names). Inputs are tried
    as they are, then as rows (the module docstring); if both fail, the error names the earlier failing node
    (the backend cuts the cone there, and an earlier cut keeps more of it). `size`: how symbolic sizes are
    read (default: refused); inputs that are sizes (SymInt values) lower to their ints."""
    failures = []
    order = {n: i for i, n in enumerate(nodes)}
    val = outputs[0].meta.get("val") if outputs else None
    dtype = val.dtype if isinstance(val, torch.Tensor) and val.dtype.is_floating_point else None
    for as_rows in (False, True):
        lw = Lowering(names=dict(names or {}), as_rows=as_rows, size=size, dtype=dtype)
        try:
            return _lower(lw, nodes, inputs, outputs)
        except UnsupportedOp as e:
            failures.append((order.get(e.node, len(order)), -len(lw.values), e))
    raise min(failures, key=lambda f: f[:2])[2]


def _lower(lw: Lowering, nodes: Sequence[Any], inputs: Sequence[Any],
           outputs: Sequence[Any]) -> tuple[KernelGraph, list[Source], list[tuple[int, ...]]]:
    for node in inputs:
        val = node.meta.get("val")
        if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):  # a size the graph computes with
            lw.values[node] = lw.size(val)
            continue
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOp(f"input {node.name} is not a tensor{where(node)}")
        lw.values[node] = Pending(Source(node), lw.sizes(val.shape), val.dtype)
    within = set(nodes)
    spelled = {node: found for node in nodes if (found := _spelled(node, within, within | set(inputs)))}
    skipped = {n for _, _, inner in spelled.values() for n in inner}
    for node in nodes:
        if node in lw.values or node in skipped:
            continue
        lw.node = node
        try:
            if node in spelled:
                name, x, _ = spelled[node]
                lw.values[node] = _map(lw, lw.values[x], getattr(lw.graph, name))
                continue
            _lower_node(lw, node)
        except UnsupportedOp as e:
            e.node = e.node or node
            raise
    outs, shapes = [], []
    for node in outputs:
        lw.node = node
        v = lw.values.get(node)
        if v is None:
            raise UnsupportedOp(f"output {node.name} is not computed by Prism ops")
        shapes.append(lw.shape(v))
        v = _copy(lw, v) if isinstance(v, Pending) else lw.value(v)
        outs.append(v.t if isinstance(v, Viewed) else v)
    if not any(n.op == "call_function" for n in nodes if lw.values.get(n) is not None):
        raise UnsupportedOp("nothing to compute")
    lw.graph.output(*outs)
    graph, kept = lw.graph.pruned()   # a sliced value's unsliced computation (_slice) is dead
    return graph, [lw.sources[j] for j in kept], shapes


def _lower_node(lw: Lowering, node: Any) -> None:
    name = op_name(node)
    if name in IGNORED:
        return
    handler = ATEN.get(name)
    if node.op != "call_function" or handler is None:
        raise UnsupportedOp(f"{name} is not a Prism op{where(node)}")
    args = [_arg(lw, a) for a in node.args]
    kwargs = {k: _arg(lw, v) for k, v in node.kwargs.items() if k not in ("dtype", "memory_format", "layout",
                                                                            "device", "pin_memory", "non_blocking")}
    try:
        lw.values[node] = handler(lw, *args, **kwargs)
    except GraphError as e:  # Prism's builder refused (shapes, dtypes): the op as used here is not Prism's
        raise lw.fail(str(e)) from None
    except UnsupportedOp as e:
        raise e if where(node) in str(e) or not where(node) else UnsupportedOp(f"{e}{where(node)}") from None


def _copy(lw: Lowering, v: Pending) -> Tensor:
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
