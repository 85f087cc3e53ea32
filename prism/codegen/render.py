"""A table op as one Triton expression: its template (prism.codegen.templates), or its decomposition's templates.

The emitter renders each compute node through `render`; a composite op (rms_norm, silu, gelu) becomes one
expression over its operands, as `x / tl.sqrt(tl.sum(x * x, axis=1, keep_dims=True) * 0.015625 + 1e-06)`.
A reduction sets the lanes of the dim it reduces that are not real (padded, or past a ragged dim's extent:
prism.codegen.layout) to its identity first (0 for a sum, -inf for a max), unless they are known to be zero
and the identity is 0 (a value is clean when its operands are and its op is zero-preserving).
"""

from __future__ import annotations

import math

import re
from dataclasses import dataclass
from typing import Any, Callable

from prism.codegen.layout import TileDim
from prism.codegen.templates import template
from prism.errors import CodegenError
from prism.ir.ops import OPS, Shape

__all__ = ["Expr", "TritonBuilder", "UNIT", "literal", "render"]

UNIT = TileDim("1", 1, 1)
"""The tile dim of a dim a sum reduced: one lane."""


@dataclass(frozen=True)
class Expr:
    """Triton text of a value, its tile dims, and whether its padded lanes are known to be zero."""

    text: str
    dims: tuple[TileDim, ...]
    clean: bool


Masks = Callable[[tuple[TileDim, ...]], "str | None"]
"""The mask of the real lanes of a tile with these dims (None: no padded lanes)."""


def literal(v: float) -> str:
    """A float constant as Triton source (negative ones in parentheses, infinities spelled out)."""
    r = repr(float(v))
    if not math.isfinite(v):
        return f'float("{r}")'
    return f"({r})" if r.startswith("-") else r


def render(op: str, args: list[Expr], attrs: dict[str, Any], masks: Masks) -> Expr:
    """Table op `op` on operand expressions `args` (matmul excluded: the emitter writes `tl.dot` itself)."""
    d, text = OPS[op], template(op)
    if not text:
        return d.decompose(TritonBuilder(masks), *args, **attrs)
    rule = d.family.rule
    if rule not in _RESULT_DIMS:
        raise CodegenError(f"{op}: only element-wise ops, sums and group sums render as expressions")
    if rule is Shape.REDUCE and args[0].dims[attrs["dim"]].masked and (not args[0].clean or d.pad != 0):
        a = args[0]   # padded lanes take the reduction's identity (0 for a sum, -inf for a max)
        args = [Expr(f"tl.where({masks(a.dims)}, {a.text}, {literal(d.pad)})", a.dims, d.pad == 0)]
    if rule is Shape.GROUP_SCALE and args[1].dims[attrs["dim"]].tile == 1:   # one group: any size
        x, s = args
        return Expr(f"{_atom(x.text)} * {_atom(s.text)}", x.dims, x.clean and s.clean)
    fields = {k: (literal(v) if isinstance(v, float) else v) for k, v in attrs.items()}
    if rule is Shape.GROUP:
        args, fields["groups"] = _groups(args[0], attrs["dim"], attrs["size"], d.pad, masks)
    if rule is Shape.GROUP_SCALE:
        (x,), fields["groups"] = _groups(args[0], attrs["dim"], attrs["size"], 0.0, masks)
        args = [x, args[1]]
        fields["scales"] = _block_shape(args[1].dims, attrs["dim"], [args[1].dims[attrs["dim"]].block_expr, "1"])
        fields["shape"] = _block_shape(x.dims)
    return Expr(_fill(text, [a.text for a in args], fields), _RESULT_DIMS[rule](args, attrs),
                d.zero_preserving and all(a.clean for a in args))


def _groups(a: Expr, dim: int, size: int, pad: float, masks: Masks) -> tuple[list[Expr], str]:
    """A group op's operand (padded lanes set to `pad`, the reduction's identity) and its block shape with
    `dim` split into (groups, size). The padded block splits evenly when `size` is a power of two
    (next_pow2(G·size) = next_pow2(G)·size)."""
    t = a.dims[dim]
    if size & (size - 1):
        raise CodegenError(f"a group op inside a kernel needs a power-of-two group size, got {size}")
    if t.ragged:   # its groups would be partial in one block and whole in another
        raise CodegenError(f"a group op inside a kernel needs a dim split evenly; tile dim {t.name} is ragged")
    if t.masked and (not a.clean or pad != 0):
        a = Expr(f"tl.where({masks(a.dims)}, {a.text}, {literal(pad)})", a.dims, pad == 0)
    return [a], _block_shape(a.dims, dim, [f"{t.block_expr} // {size}", str(size)])


def _block_shape(dims: tuple[TileDim, ...], dim: int = 0, split: list[str] | None = None) -> str:
    """The tuple of a tile's block sizes, with dim `dim` replaced by the sizes `split` if given."""
    shape = [x.block_expr for x in dims]
    if split is not None:
        shape[dim:dim + 1] = split
    return f"({', '.join(shape)})"


class TritonBuilder:
    """The Triton builder a decomposition (prism.ir.ops) is written with: a mean's 1/N is the tile's extent."""

    def __init__(self, masks: Masks) -> None:
        self.masks = masks

    def __call__(self, op: str, *args: Expr, **attrs: Any) -> Expr:
        return render(op, list(args), attrs, self.masks)

    def rank(self, x: Expr) -> int:
        return len(x.dims)

    def inv_extent(self, x: Expr, dim: int) -> float:
        if x.dims[dim].ragged:   # the mean of a partial tile is over fewer elements in one block than another
            raise CodegenError(f"a mean over tile dim {x.dims[dim].name}, whose last tile is partial")
        return 1.0 / x.dims[dim].tile


def _broadcast(args: list[Expr], attrs: dict[str, Any]) -> tuple[TileDim, ...]:
    a, b = args
    return tuple(y if x.tile == 1 else x for x, y in zip(a.dims, b.dims))


_RESULT_DIMS = {  # the tile dims of an op's result, keyed by its family's shape rule (no contraction: tl.dot)
    Shape.SAME: lambda args, attrs: args[0].dims,
    Shape.BROADCAST: _broadcast,
    Shape.REDUCE: lambda args, attrs: tuple(UNIT if d == attrs["dim"] else t for d, t in enumerate(args[0].dims)),
    Shape.GROUP_SCALE: lambda args, attrs: args[0].dims,
    Shape.GROUP: lambda args, attrs: tuple(TileDim(f"{t.name}_{attrs['size']}", attrs["size"], attrs["size"])
                                       if d == attrs["dim"] else t for d, t in enumerate(args[0].dims)),
}


def _fill(template: str, operands: list[str], fields: dict[str, Any]) -> str:
    """`template` with operand texts for `{0}`, `{1}`, ... (in parentheses where an operator could bind into
    them) and `fields` for the named placeholders."""
    def operand(m: re.Match) -> str:
        before, after = template[:m.start()].rstrip()[-1:], template[m.end():].lstrip()[:1]
        text = operands[int(m.group(1))]
        return text if before in ("(", ",") and after in (")", ",") else _atom(text)
    return re.sub(r"\{(\d+)\}", operand, template).format(**fields)


def _atom(text: str) -> str:
    """`text` as an operand of an operator: as it is if a name or one call, else in parentheses."""
    if re.fullmatch(r"[\w.]+", text):
        return text
    call = re.match(r"[\w.]+\(", text)
    if call:
        depth = 0
        for k in range(call.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                return text if k == len(text) - 1 else f"({text})"
    return f"({text})"
