"""Each table op's Triton expression, keyed by op: a `str.format` template over operand texts `{0}`, `{1}` and the
op's attributes by name, which prism.codegen.render fills (matmul's `{extra}`: the accumulator and precision
arguments the emitter adds, and an accumulator's update reads its combine op's template: prism.codegen.emit.update).
An op without a template, one registered at run time included, renders its decomposition (prism.ir.ops: rms_norm,
silu and gelu do).
"""

from __future__ import annotations

__all__ = ["TRITON", "template"]


def _group(reduce: str) -> str:
    """A group op's template: Triton's reduction `reduce` (sum, max) over the groups. `{groups}`: the tile's block
    shape with dim split into (groups, size), written by the renderer, which needs `size` to be a power of two so
    that the padded block splits evenly."""
    return f"tl.{reduce}(tl.reshape({{0}}, {{groups}}), axis={{dim}})"


GROUP_SCALE = "tl.reshape(tl.reshape({0}, {groups}) * tl.reshape({1}, {scales}), {shape})"
"""`{scales}`: the scales' block shape with (groups, 1) at dim; `{shape}`: the operand's block shape."""

TRITON: dict[str, str] = {
    "matmul": "tl.dot({0}, {1}{extra})",
    "exp": "tl.exp({0})",
    "relu": "tl.maximum({0}, 0.0)",
    "sqrt": "tl.sqrt({0})",
    "square": "{0} * {0}",
    "neg": "-{0}",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "sum": "tl.sum({0}, axis={dim}, keep_dims=True)",
    "max": "tl.max({0}, axis={dim}, keep_dims=True)",
    "group_sum": _group("sum"),
    "group_max": _group("max"),
    "group_scale": GROUP_SCALE,
    "mul_scalar": "{0} * {value}",
    "add_scalar": "{0} + {value}",
    "maximum": "tl.maximum({0}, {1})",
    "sigmoid": "tl.sigmoid({0})",
    "erf": "tl.erf({0})",
}


def template(op: str) -> str:
    """`op`'s template, or "" where it has none (it renders its decomposition)."""
    return TRITON.get(op, "")

