"""The op table: every compute op Prism knows, each defined once, with everything a pass needs to know about it.

An `OpDef` holds the op's family (operand count, shape rule, attribute check, how verification terms write
the family), its traits as data (commutative, linear, FLOPs per element, zero-preserving, its part in the
online softmax), its torch meaning, its verification term and, for a composite op, its decomposition into other
ops of the table; its Triton expression is code generation's (prism.codegen.templates). A pass with no entry of its
own for an op uses the decomposition instead: the torch meanings of rms_norm, silu and gelu, the Triton code of all
three, the verification terms
and search closure of rms_norm (silu and gelu stay single terms there: they are element-wise, and the
family's rules cover them).

Other modules derive what they need from this table (the term language's op families, the numeric model's
meanings, the cost model's FLOPs, the search's commutative ops, who passes on a running max) and never list
ops, so a new op is one `OpDef` given to `register`; `tests/ir/test_ops.py` fails if an entry is incomplete,
tests/ir/test_rule_coverage.py if a pass's per-family table lacks a family, and tests/ir/test_op_name_dispatch.py
if a module outside the tables dispatches on op names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Protocol

import torch

from prism.errors import DTypeError, GraphError, ShapeError

__all__ = [
    "DTYPES", "TORCH_DTYPES", "TType", "Shape", "Family", "Passes", "OnlineRule", "OpDef", "Builder", "OPS",
    "UNARY", "SCALAR", "BINARY", "REDUCE", "MAX_REDUCE", "GROUP", "GROUP_SCALE", "MATMUL", "ROWWISE", "FAMILIES",
    "RUNNING", "SHIFTED", "SCALED", "TORCH", "rescaling",
    "check_dtype", "contracts", "op", "register", "unregister", "watch", "refresh", "revision", "runtime_ops",
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


class Builder(Protocol):
    """What a pass gives a decomposition to build with, in its own values (tensors, terms, Triton text, ...)."""

    def __call__(self, op: str, *operands: Any, **attrs: Any) -> Any:
        """Table op `op` applied to `operands`."""

    def rank(self, x: Any) -> int:
        """The number of dims of `x`."""

    def inv_extent(self, x: Any, dim: int) -> Any:
        """1/N for the extent N of dim `dim` of `x`, as this pass writes a constant."""


class Shape(Enum):
    """A family's shape rule: how its result's dims follow from its operands'. Every pass that shapes values (this
    module, verification types and meanings, the symbolic dims and terms, the tile layout, inline Triton) keys its
    own table by it, and tests/ir/test_rule_coverage.py names a family whose rule a table lacks."""

    SAME = "same"                 # the operand's dims (element-wise, one operand; a row-wise op)
    BROADCAST = "broadcast"       # the operands' dims, size-1 dims stretched (element-wise, two operands)
    REDUCE = "reduce"             # the operand's dims, the reduced one 1
    GROUP = "group"               # the operand's dims, the grouped one the group size
    GROUP_SCALE = "group_scale"   # the first operand's dims (the second has one value per group)
    CONTRACT = "contract"         # a's dims, the last b's last (batched matmul)


@dataclass(frozen=True)
class Family:
    """What the ops of one family share: operand count, shape rule, attribute check, and their terms.

    `rule` is the shape rule (Shape), the key of every pass's per-family table. `contraction`: the family
    contracts a dim of one operand with a dim of the other (matmul), the one property every pass that treats
    matmul apart asks for. `elementwise`: each output element is computed from the operands' elements at its
    position.
    How the family's ops are written as verification terms is the verifier's (prism.verify.expr.FAMILY_TERMS).
    """

    name: str
    arity: int
    rule: Shape
    check: Callable[[OpDef, tuple[TType, ...], dict[str, Any]], dict[str, Any]]
    elementwise: bool = False

    @property
    def contraction(self) -> bool:
        """Does the family contract a dim of one operand with a dim of the other (matmul)?"""
        return self.rule is Shape.CONTRACT


RUNNING, SHIFTED, SCALED = "running", "shifted", "scaled"
"""How a loop value depends on a running max m (the online softmax; prism.ir.kinds.scaling applies the rule):
it is m itself, x - m for an x independent of m, or exp(-m) times a value independent of m, position by position
(what an online accumulator bound to m can rescale as m grows). None: independent of every running max."""


@dataclass(frozen=True)
class Passes:
    """One case of an op's online-softmax rule: operands in states `takes` (RUNNING, SHIFTED, SCALED or None, one
    per operand, all of one running max m) give a value in state `gives`. A commutative op takes its operands in
    either order. `along`: where the op adds up values of several positions (a sum's dim, a contraction's inner
    dim), each term must carry the same factor exp(-m), so m must have extent 1 there: the name of the op's
    attribute giving that dim, or a dim of m (-1: its last, a matmul's rows)."""

    takes: tuple[str | None, ...]
    gives: str
    along: str | int | None = None


@dataclass(frozen=True)
class OnlineRule:
    """An op's part in the online softmax, the one table of that rule: BlockGraph and the search's sGraph apply
    `passes` (prism.ir.kinds.scaling), the tuner's overflow check, the search's closure (SHIFT_FORMS), its
    generator and the ATen partitioner read the rest.

    passes: how the op passes on its operands' dependence on a running max; with none, a value that depends on
    one may not be its operand inside the loop. bound: its value bounds its operand from above along a dim (a
    max, a group max): x - it <= 0, so a running max may track it and exp(x - it) is at most 1. ratio: a factor
    common to both operands cancels (a quotient), so exp(x) and exp(x - m) in numerator and denominator give
    the same value: the reason the max-subtracted softmax is the paper's exp/sum/div."""

    passes: tuple[Passes, ...] = ()
    bound: bool = False
    ratio: bool = False

    @property
    def shift(self) -> Passes | None:
        """The case making x - m from x and m (sub), or None."""
        return next((c for c in self.passes if c.gives == SHIFTED), None)

    @property
    def exponential(self) -> bool:
        """It turns a shift by m into the factor exp(-m) (exp): its value has no upper bound unless its operand
        is x minus a bound of x, so a float16 kernel can overflow."""
        return any(SHIFTED in c.takes for c in self.passes)

    @property
    def summing(self) -> bool:
        """It adds up a scaled value along one of its dims (a sum), carrying the factor out."""
        return any(c.takes == (SCALED,) and isinstance(c.along, str) for c in self.passes)


@dataclass(frozen=True)
class OpDef:
    """One op. `attrs` names its non-tensor arguments in positional order; `defaults` gives optional ones.

    Meanings: `torch_fn(*tensors, **attrs)` is the reference meaning (the executor's and the tests'); `term`
    names its verification term (None: verification expands `decompose`, or writes the op with parallel ops, as
    prism.verify.encode.PARALLEL_FORMS says). `decompose(f, *operands, **attrs)` writes the op with other
    table ops through a pass's `Builder` f; a missing torch meaning or Triton expression comes from it.

    Traits: `commutative` (operands may be swapped), `linear` (f(a + b) = f(a) + f(b), operands taken
    jointly), `linear_first` (linear in its first operand, the second held fixed), `flops` (vector FLOPs
    per element: special-function ops cost several), `zero_preserving` (f(0, ...) = 0, so zeroed padding
    lanes stay zero). For a reduction: `pad`, the value padded lanes take before it reduces over them (its
    identity: 0 for a sum, -inf for a max), and `accumulator`, the accumulator kind (prism.ir.kinds) that
    combines its results over loop tiles. `online`: its part in the online softmax (OnlineRule). `grouped`:
    the group op that reduces the contiguous groups of a dim as this reduction reduces the whole dim (a first
    kernel may sum a tile in groups and leave the rest to the second: prism.symbolic.structure.group_variant).
    """

    name: str
    family: Family
    doc: str
    torch_fn: Callable[..., torch.Tensor] | None = None
    attrs: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    term: str | None = None
    decompose: Callable[..., Any] | None = None
    commutative: bool = False
    linear: bool = False
    linear_first: bool = False
    flops: int = 1
    zero_preserving: bool = False
    pad: float = 0.0
    accumulator: str = "accum"
    online: OnlineRule = OnlineRule()
    grouped: str = ""

    def __post_init__(self) -> None:
        if self.torch_fn is None:
            if self.decompose is None:
                raise GraphError(f"op {self.name}: give a torch meaning (torch_fn) or a decomposition")
            object.__setattr__(self, "torch_fn", lambda *xs, **attrs: self.decompose(TORCH, *xs, **attrs))

    @property
    def arity(self) -> int:
        return self.family.arity

    def normalize_attrs(self, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Check and canonicalise attributes (e.g. a negative `dim` becomes non-negative)."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise GraphError(f"{self.name}: unknown attribute(s) {sorted(unknown)}")
        out = {k: attrs.get(k, self.defaults.get(k)) for k in self.attrs}
        missing = [k for k, v in out.items() if v is None]
        if missing:
            raise GraphError(f"{self.name}: missing attribute(s) {missing}")
        return self.family.check(self, types, out)

    def infer(self, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> TType:
        """The result type, or a ShapeError/DTypeError naming the op and its operands."""
        if len(types) != self.arity:
            raise GraphError(f"{self.name}: expected {self.arity} tensor operand(s), got {len(types)}")
        dtypes = {t.dtype for t in types}
        if len(dtypes) != 1:
            raise DTypeError(f"{self.name}: operands have different dtypes: {', '.join(map(str, types))}")
        return TType(_SHAPES[self.family.rule](self, types, attrs), types[0].dtype)


class _Torch:
    """The torch builder: decompositions evaluated on tensors (the reference meaning of composite ops, the
    executor's rescaling)."""

    def __call__(self, op: str, *xs: torch.Tensor, **attrs: Any) -> torch.Tensor:
        return OPS[op].torch_fn(*xs, **attrs)

    def rank(self, x: torch.Tensor) -> int:
        return x.dim()

    def inv_extent(self, x: torch.Tensor, dim: int) -> float:
        return 1.0 / x.shape[dim]


TORCH = _Torch()

# ---- shape rules, keyed by Family.rule ------------------------------------------------------------


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


def _group(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    shape = list(types[0].shape)
    shape[attrs["dim"]] = attrs["size"]
    return tuple(shape)


def _contract(op: OpDef, types: tuple[TType, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    a, b = types
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise ShapeError(f"matmul: operands {a} and {b} must have the same rank, at least 2")
    if a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"matmul: batch dims of {a} and {b} differ")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: inner dims differ: {a} has {a.shape[-1]} columns, "
                         f"{b} has {b.shape[-2]} rows")
    return a.shape[:-1] + b.shape[-1:]


_SHAPES = {Shape.SAME: _same_shape, Shape.BROADCAST: _broadcast, Shape.REDUCE: _reduce, Shape.GROUP: _group,
           Shape.GROUP_SCALE: _same_shape, Shape.CONTRACT: _contract}

# ---- attribute checks ----------------------------------------------------------------------------


def _no_attrs(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return attrs


def _finite(op: OpDef, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GraphError(f"{op.name}: {name} must be a finite number, got {value!r}")
    return float(value)


def _check_scalar(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return {"value": _finite(op, "value", attrs["value"])}


def _check_eps(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    eps = _finite(op, "eps", attrs["eps"])
    if eps < 0:
        raise GraphError(f"{op.name}: eps must be >= 0, got {eps}")
    return {"eps": eps}


def _check_dim(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    dim, rank = attrs["dim"], len(types[0].shape) if types else 0
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise ShapeError(f"{op.name}: dim {dim!r} is out of range for {types[0] if types else 'a tensor'}")
    return {"dim": dim % rank}


def _check_group(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    dim = _check_dim(op, types, {"dim": attrs["dim"]})["dim"]
    size, extent = attrs["size"], types[0].shape[dim]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1 or extent % size:
        raise ShapeError(f"{op.name}: size {size!r} must be a positive int dividing the extent {extent} of dim "
                         f"{dim} of {types[0]} (the dim holds whole groups of that size)")
    return {"dim": dim, "size": size}


def _check_group_scale(op: OpDef, types: tuple[TType, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    attrs = _check_group(op, types, attrs)
    (x, s), dim, size = types, attrs["dim"], attrs["size"]
    want = x.shape[:dim] + (x.shape[dim] // size,) + x.shape[dim + 1:]
    if s.shape != want:
        raise ShapeError(f"{op.name}: the scales {s} must have one value per group of {size} along dim {dim} of "
                         f"{x}, shape {list(want)}")
    return attrs


# ---- the families --------------------------------------------------------------------------------

UNARY = Family("unary", 1, Shape.SAME, _no_attrs, elementwise=True)
SCALAR = Family("scalar", 1, Shape.SAME, _check_scalar, elementwise=True)
BINARY = Family("binary", 2, Shape.BROADCAST, _no_attrs, elementwise=True)
REDUCE = Family("reduce", 1, Shape.REDUCE, _check_dim)
MAX_REDUCE = Family("max_reduce", 1, Shape.REDUCE, _check_dim)
"""A max over a dim: shaped like a sum, but with none of a sum's algebra (not linear)."""
GROUP = Family("group", 1, Shape.GROUP, _check_group)
"""A sum over the groups of a dim: its extent G·size read as G contiguous groups of `size`, added element-wise
(`out[..., j] = Σ_k x[..., k·size + j]`). It folds back partials that a grid dim concatenated along a data dim
(split-KV attention's second kernel; Mirage's reduce-to-dimx); group_max takes their max instead. Its ops have
no term of their own: verification writes them as the part and red (redmax) of the parallel dims that
concatenated the groups (prism.verify.encode.PARALLEL_FORMS)."""
GROUP_SCALE = Family("group_scale", 2, Shape.GROUP_SCALE, _check_group_scale)
"""x times one scale per group: `out[..., k·size + j] = x[..., k·size + j] · s[..., k]`. The safe split-KV
combine rescales each split's partial sums (groups of d along a dim) by exp(m_split - m_max), one value per
split; broadcasting cannot stretch s that way. Verification writes it member by member over the parallel
dims that concatenated the groups (part both, multiply, comb)."""
MATMUL = Family("matmul", 2, Shape.CONTRACT, _no_attrs)
ROWWISE = Family("rowwise", 1, Shape.SAME, _check_eps)
"""An op over whole rows (the last dim) with a constant eps: composite, so it has no terms of its own."""
FAMILIES = (UNARY, SCALAR, BINARY, REDUCE, MAX_REDUCE, GROUP, GROUP_SCALE, MATMUL, ROWWISE)
"""Every family, for the tests that check each pass's per-family tables have an entry for each."""

# ---- decompositions ------------------------------------------------------------------------------

SQRT_HALF = 0.7071067811865476


def _rms_norm(f: Builder, x: Any, eps: float) -> Any:
    """x / sqrt(sum(x², last dim) · 1/N + eps); the add is left out when eps is 0."""
    last = f.rank(x) - 1
    ms = f("mul_scalar", f("sum", f("square", x), dim=last), value=f.inv_extent(x, last))
    return f("div", x, f("sqrt", f("add_scalar", ms, value=eps) if eps else ms))


def _silu(f: Builder, x: Any) -> Any:
    """x · sigmoid(x)"""
    return f("mul", x, f("sigmoid", x))


def _gelu(f: Builder, x: Any) -> Any:
    """x/2 · (1 + erf(x/√2)), the exact form"""
    return f("mul", f("mul_scalar", x, value=0.5),
             f("add_scalar", f("erf", f("mul_scalar", x, value=SQRT_HALF)), value=1.0))


def rescaling(f: Builder, before: Any, after: Any) -> Any:
    """exp(before - after): the factor that turns a value scaled by exp(-before) into one scaled by exp(-after), at
    most 1 where after >= before. The online softmax rescales its sums by it as the running max grows from
    before to after (prism.ir.kinds.Online, and the code it is emitted as), and split-KV's combine each split's
    sums, from the split's max to the largest (prism.symbolic.structure)."""
    return f("exp", f("sub", before, after))


def _grouped(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """x with dim split into (groups, size)."""
    return x.reshape(*x.shape[:dim], x.shape[dim] // size, size, *x.shape[dim + 1:])


def _group_sum(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    return _grouped(x, dim, size).sum(dim=dim)


def _group_max(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    return _grouped(x, dim, size).amax(dim=dim)


def _group_scale(x: torch.Tensor, s: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    return (_grouped(x, dim, size) * s.unsqueeze(dim + 1)).reshape(x.shape)

# ---- the table -----------------------------------------------------------------------------------

OPS: dict[str, OpDef] = {}
_WATCHERS: list[Callable[[], None]] = []
_REVISION = [0]


def register(d: OpDef) -> OpDef:
    """Add op `d` to the table; everything derived from the table (builder methods, the term language, ...)
    follows at once."""
    if not isinstance(d, OpDef):
        raise GraphError(f"register: expected an OpDef, got {type(d).__name__}")
    if d.name in OPS:
        raise GraphError(f"register: an op named {d.name!r} already exists")
    if not d.name.isidentifier():
        raise GraphError(f"register: op name {d.name!r} must be an identifier")
    OPS[d.name] = d
    refresh()
    return d


def unregister(name: str) -> None:
    """Remove op `name` from the table (tests that define an op of their own)."""
    del OPS[op(name).name]
    refresh()


def watch(derive: Callable[[], None]) -> Callable[[], None]:
    """Call `derive` now and after every change of the table: how other modules keep derived tables."""
    _WATCHERS.append(derive)
    derive()
    return derive


def revision() -> int:
    """A number that changes whenever the table, or a table registered beside it (refresh), does: for caches of
    derived data."""
    return _REVISION[0]


def refresh() -> None:
    """Derive everything derived from the IR's tables again: the op table, and the tables beside it that follow
    the same registration (the node kinds of prism.ir.kinds, the axioms of prism.verify.axioms) call it when
    they change."""
    _REVISION[0] += 1
    for derive in _WATCHERS:
        derive()


def op(name: str) -> OpDef:
    """The OpDef called `name`, or a GraphError listing the known ops."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None


for _d in [
    OpDef("matmul", MATMUL, "batched matmul: a's last dim times b's second-last", torch.matmul,
          term="matmul", zero_preserving=True,
          online=OnlineRule((Passes((SCALED, None), SCALED, along=-1),))),   # (e^-m·a) @ b = e^-m·(a @ b), m per row
    OpDef("exp", UNARY, "e**x", torch.exp, term="exp", flops=4,
          online=OnlineRule((Passes((SHIFTED,), SCALED),))),                 # e^(x-m) = e^-m·e^x
    OpDef("silu", UNARY, "x * sigmoid(x)", term="silu", decompose=_silu, flops=6, zero_preserving=True),
    OpDef("gelu", UNARY, "x * Phi(x), the exact (erf) form", term="gelu", decompose=_gelu, flops=8,
          zero_preserving=True),
    OpDef("relu", UNARY, "max(x, 0)", torch.relu, term="relu",
          zero_preserving=True),
    OpDef("sqrt", UNARY, "square root", torch.sqrt, term="sqrt", flops=4,
          zero_preserving=True),
    OpDef("square", UNARY, "x * x", torch.square, term="square", zero_preserving=True),
    OpDef("neg", UNARY, "-x", torch.neg, term="neg", linear=True, zero_preserving=True),
    OpDef("add", BINARY, "a + b, broadcasting size-1 dims", torch.add, term="add",
          commutative=True, linear=True, zero_preserving=True,
          online=OnlineRule((Passes((SCALED, SCALED), SCALED),))),           # e^-m·a + e^-m·b = e^-m·(a + b)
    OpDef("sub", BINARY, "a - b, broadcasting size-1 dims", torch.sub, term="sub",
          linear=True, zero_preserving=True,
          online=OnlineRule((Passes((None, RUNNING), SHIFTED),               # x - m
                             Passes((SCALED, SCALED), SCALED)))),            # e^-m·a - e^-m·b = e^-m·(a - b)
    OpDef("mul", BINARY, "a * b, broadcasting size-1 dims", torch.mul, term="mul",
          commutative=True, linear_first=True, zero_preserving=True,
          online=OnlineRule((Passes((SCALED, None), SCALED),))),             # e^-m·a · b = e^-m·(a·b)
    OpDef("div", BINARY, "a / b, broadcasting size-1 dims", torch.div, term="div",
          linear_first=True, flops=4,
          online=OnlineRule((Passes((SCALED, None), SCALED),), ratio=True)),  # e^-m·a / b = e^-m·(a / b)
    OpDef("sum", REDUCE, "sum over dim, kept as size 1", lambda x, dim: x.sum(dim=dim, keepdim=True),
          attrs=("dim",), term="sum", zero_preserving=True,
          grouped="group_sum",
          online=OnlineRule((Passes((SCALED,), SCALED, along="dim"),))),     # sum(e^-m·a, d) = e^-m·sum(a, d)
    OpDef("max", MAX_REDUCE, "max over dim, kept as size 1", lambda x, dim: x.amax(dim=dim, keepdim=True),
          attrs=("dim",), term="max", pad=-math.inf,
          accumulator="accum_max", online=OnlineRule(bound=True)),              # x - max(x, d) <= 0
    OpDef("group_sum", GROUP, "sum of the contiguous groups of `size` along dim: out[..., j] = sum_k x[..., k*size+j]",
          _group_sum, attrs=("dim", "size"), zero_preserving=True),
    OpDef("group_max", GROUP, "max of the contiguous groups of `size` along dim: out[..., j] = max_k x[..., k*size+j]",
          _group_max, attrs=("dim", "size"), pad=-math.inf, accumulator="accum_max",
          online=OnlineRule(bound=True)),
    OpDef("group_scale", GROUP_SCALE, "x times one scale per group of `size` along dim: "
          "out[..., k*size+j] = x[..., k*size+j] * s[..., k]", _group_scale, attrs=("dim", "size"),
          linear_first=True, zero_preserving=True),
    OpDef("rms_norm", ROWWISE, "x / sqrt(mean(x**2 over the last dim) + eps)", attrs=("eps",),
          defaults={"eps": 0.0}, decompose=_rms_norm, flops=4),
    OpDef("mul_scalar", SCALAR, "x * value for a constant", lambda x, value: x * value, attrs=("value",),
          term="scale", linear=True, zero_preserving=True,
          online=OnlineRule((Passes((SCALED,), SCALED),))),                  # (e^-m·a)·c = e^-m·(a·c)
    OpDef("add_scalar", SCALAR, "x + value for a constant", lambda x, value: x + value, attrs=("value",),
          term="shift"),
    OpDef("maximum", BINARY, "the larger of a and b, broadcasting size-1 dims", torch.maximum,
          term="maximum", commutative=True),
    OpDef("sigmoid", UNARY, "1 / (1 + e**-x)", torch.sigmoid, term="sigmoid", flops=4),
    OpDef("erf", UNARY, "the error function", torch.erf, term="erf", flops=4,
          zero_preserving=True),
]:
    register(_d)
_BUILTIN = frozenset(OPS)


def contracts(name: str) -> bool:
    """Is `name` a table op that contracts (a matmul, Family.contraction)? False for any other name: a loader, an
    accumulator, a term's input."""
    d = OPS.get(name)
    return d is not None and d.family.contraction


def runtime_ops() -> list[str]:
    """The ops registered after import (`register` at run time): a spawned process, which builds the table by
    importing this module, does not have them."""
    return sorted(set(OPS) - _BUILTIN)
