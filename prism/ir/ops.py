"""The op registry: every compute op Prism knows, each defined once with its shape rule and torch meaning.

Kernel graphs (full tensors) and block graphs (tiles) share these ops. Everything a later pass needs
to know about an op (verification term, Triton lowering) is attached to its `OpDef` here, so adding an
op means adding one entry, and `tests/ir/test_ops.py` fails if an entry is incomplete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from prism.errors import DTypeError, GraphError, ShapeError

__all__ = [
    "DTYPES",
    "TORCH_DTYPES",
    "TType",
    "OpDef",
    "OPS",
    "UNARY",
    "BINARY",
    "SCALAR",
    "COMMUTATIVE",
    "ELEMENTWISE",
    "check_dtype",
    "op",
]

DTYPES = ("float16", "bfloat16", "float32", "float64")
TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}


def check_dtype(dtype: Any, where: str) -> str:
    """Return `dtype` as one of DTYPES (accepting torch dtypes too), or raise DTypeError."""
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise DTypeError(f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return dtype


@dataclass(frozen=True)
class TType:
    """The type of a tensor: its shape and dtype."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class OpDef:
    """One op: how many tensor operands, which attributes, its type rule and its torch semantics.

    `attrs` names the op's non-tensor arguments in positional order; `defaults` gives the optional
    ones. `torch_fn(*tensors, **attrs)` is the reference meaning the executor and the tests rely on.
    `term` names the verification-term constructor (prism.verify.expr) the op is encoded with; ops of
    kind "norm" are encoded by expanding them into other terms.
    `triton` is the op's Triton lowering (prism.codegen): a `str.format` template over operand
    names `{0}`, `{1}`, the attributes by name, `{last}` (the last axis) and `{n}` (its size), and
    for matmul `{extra}` (the accumulator and precision arguments the code generator adds).
    """

    name: str
    arity: int
    kind: str
    torch_fn: Callable[..., torch.Tensor]
    doc: str
    term: str
    attrs: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    triton: str = ""

    def normalize_attrs(self, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Check and canonicalise attributes (e.g. a negative `dim` becomes non-negative)."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise GraphError(f"{self.name}: unknown attribute(s) {sorted(unknown)}")
        out = {k: attrs.get(k, self.defaults.get(k)) for k in self.attrs}
        missing = [k for k, v in out.items() if v is None]
        if missing:
            raise GraphError(f"{self.name}: missing attribute(s) {missing}")
        return _ATTR_CHECKS[self.kind](self, types, out)

    def infer(self, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> TType:
        """The result type, or a ShapeError/DTypeError naming the op and its operands."""
        if len(types) != self.arity:
            raise GraphError(f"{self.name}: expected {self.arity} tensor operand(s), got {len(types)}")
        dtypes = {t.dtype for t in types}
        if len(dtypes) != 1:
            raise DTypeError(f"{self.name}: operands have different dtypes: {', '.join(map(str, types))}")
        return TType(_SHAPE_RULES[self.kind](self, types, attrs), types[0].dtype)


# ---- shape rules, one per kind ---------------------------------------------------------------


def _same_shape(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    return types[0].shape


def _broadcast(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    a, b = types
    if len(a.shape) != len(b.shape):
        raise ShapeError(f"{op.name}: operands {a} and {b} have different ranks (Prism broadcasts "
                         "size-1 dims only, between tensors of equal rank)")
    out = []
    for i, (m, n) in enumerate(zip(a.shape, b.shape)):
        if m != n and m != 1 and n != 1:
            raise ShapeError(f"{op.name}: cannot broadcast {a} with {b}: dim {i} is {m} vs {n}")
        out.append(max(m, n))
    return tuple(out)


def _reduce(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    shape = list(types[0].shape)
    shape[attrs["dim"]] = 1
    return tuple(shape)


def _matmul(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    a, b = types
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise ShapeError(f"matmul: operands {a} and {b} must have the same rank, at least 2")
    if a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"matmul: batch dims of {a} and {b} differ")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: inner dims differ: {a} has {a.shape[-1]} columns, "
                         f"{b} has {b.shape[-2]} rows")
    return a.shape[:-1] + b.shape[-1:]


_SHAPE_RULES = {
    "unary": _same_shape,
    "scalar": _same_shape,
    "norm": _same_shape,
    "binary": _broadcast,
    "reduce": _reduce,
    "matmul": _matmul,
}

# ---- attribute checks, one per kind ----------------------------------------------------------


def _no_attrs(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return attrs


def _finite(op: OpDef, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GraphError(f"{op.name}: {name} must be a finite number, got {value!r}")
    return float(value)


def _check_scalar(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return {"value": _finite(op, "value", attrs["value"])}


def _check_norm(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    eps = _finite(op, "eps", attrs["eps"])
    if eps < 0:
        raise GraphError(f"{op.name}: eps must be >= 0, got {eps}")
    return {"eps": eps}


def _check_reduce(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    dim, rank = attrs["dim"], len(types[0].shape) if types else 0
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise ShapeError(f"{op.name}: dim {dim!r} is out of range for {types[0] if types else 'a tensor'}")
    return {"dim": dim % rank}


_ATTR_CHECKS = {
    "unary": _no_attrs,
    "binary": _no_attrs,
    "matmul": _no_attrs,
    "scalar": _check_scalar,
    "norm": _check_norm,
    "reduce": _check_reduce,
}

# ---- the table -------------------------------------------------------------------------------


def _rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)


_DEFS = [
    OpDef("matmul", 2, "matmul", torch.matmul, "batched matmul: a's last dim times b's second-last", "matmul",
          triton="tl.dot({0}, {1}{extra})"),
    OpDef("exp", 1, "unary", torch.exp, "e**x", "exp", triton="tl.exp({0})"),
    OpDef("silu", 1, "unary", F.silu, "x * sigmoid(x)", "silu", triton="{0} * tl.sigmoid({0})"),
    OpDef("gelu", 1, "unary", F.gelu, "x * Phi(x), the exact (erf) form", "gelu",
          triton="0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476))"),
    OpDef("relu", 1, "unary", torch.relu, "max(x, 0)", "relu", triton="tl.maximum({0}, 0.0)"),
    OpDef("sqrt", 1, "unary", torch.sqrt, "square root", "sqrt", triton="tl.sqrt({0})"),
    OpDef("square", 1, "unary", torch.square, "x * x", "square", triton="{0} * {0}"),
    OpDef("neg", 1, "unary", torch.neg, "-x", "neg", triton="-{0}"),
    OpDef("add", 2, "binary", torch.add, "a + b, broadcasting size-1 dims", "add", triton="{0} + {1}"),
    OpDef("sub", 2, "binary", torch.sub, "a - b, broadcasting size-1 dims", "sub", triton="{0} - {1}"),
    OpDef("mul", 2, "binary", torch.mul, "a * b, broadcasting size-1 dims", "mul", triton="{0} * {1}"),
    OpDef("div", 2, "binary", torch.div, "a / b, broadcasting size-1 dims", "div", triton="{0} / {1}"),
    OpDef("sum", 1, "reduce", lambda x, dim: x.sum(dim=dim, keepdim=True), "sum over dim, kept as size 1",
          "sum",
          attrs=("dim",), triton="tl.sum({0}, axis={dim}, keep_dims=True)"),
    OpDef("rms_norm", 1, "norm", _rms_norm, "x / sqrt(mean(x**2 over the last dim) + eps)", "div",
          attrs=("eps",), defaults={"eps": 0.0},
          triton="{0} / tl.sqrt(tl.sum({0} * {0}, axis={last}, keep_dims=True) / {n} + {eps})"),
    OpDef("mul_scalar", 1, "scalar", lambda x, value: x * value, "x * value for a constant", "scale",
          attrs=("value",), triton="{0} * {value}"),
    OpDef("add_scalar", 1, "scalar", lambda x, value: x + value, "x + value for a constant", "shift",
          attrs=("value",), triton="{0} + {value}"),
]

OPS: dict[str, OpDef] = {d.name: d for d in _DEFS}

UNARY = frozenset(n for n, d in OPS.items() if d.kind == "unary")
BINARY = frozenset(n for n, d in OPS.items() if d.kind == "binary")
SCALAR = frozenset(n for n, d in OPS.items() if d.kind == "scalar")
COMMUTATIVE = frozenset({"add", "mul"})
ELEMENTWISE = UNARY | BINARY | SCALAR


def op(name: str) -> OpDef:
    """The OpDef called `name`, or a GraphError listing the known ops."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None
