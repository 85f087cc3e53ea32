"""Every op has a Triton lowering, and each lowering means what the op means.

Each op is rendered as the emitter renders it (prism.codegen.render: its template, or its decomposition
into ops with templates), with `tl` stood in for by torch functions, and compared with the op's torch
semantics, so a lowering that computes the wrong thing (silu as sigmoid, a binary op that divides) fails
without a GPU or even Triton."""

import math
from types import SimpleNamespace

import pytest
import torch

from prism.codegen.layout import TileDim
from prism.codegen.render import Expr, render as render_expr
from prism.codegen.templates import template
from prism.ir.ops import MATMUL, OPS

TL = SimpleNamespace(
    exp=torch.exp, sigmoid=torch.sigmoid, erf=torch.erf, sqrt=torch.sqrt,
    maximum=lambda a, b: torch.maximum(a, torch.as_tensor(b, dtype=a.dtype)),
    sum=lambda x, axis, keep_dims=False: x.sum(dim=axis, keepdim=keep_dims),
    max=lambda x, axis, keep_dims=False: x.amax(dim=axis, keepdim=keep_dims),
    dot=torch.matmul, reshape=lambda x, shape: x.reshape(shape),
)

ARGS = {
    "matmul": ([(3, 5), (5, 4)], {}),
    "add": ([(3, 4), (3, 1)], {}), "sub": ([(1, 4), (3, 4)], {}),
    "mul": ([(3, 4), (3, 4)], {}), "div": ([(3, 4), (3, 1)], {}),
    "sum": ([(3, 4)], {"dim": 1}), "max": ([(3, 4)], {"dim": 1}), "maximum": ([(3, 4), (3, 1)], {}),
    "rms_norm": ([(3, 8)], {"eps": 1e-3}), "group_sum": ([(3, 8)], {"dim": 1, "size": 2}),
    "group_max": ([(3, 8)], {"dim": 1, "size": 2}), "group_scale": ([(3, 8), (3, 4)], {"dim": 1, "size": 2}),
    "mul_scalar": ([(3, 4)], {"value": -0.25}), "add_scalar": ([(3, 4)], {"value": 1.5}),
}


def render(name, operands, attrs):
    """The op with operands named a0, a1 (unpadded tiles) as the emitter renders it."""
    if OPS[name].family is MATMUL:  # the emitter writes tl.dot's extra arguments itself
        return template(name).format("a0", "a1", extra="")
    exprs = [Expr(f"a{k}", tuple(TileDim(f"A{k}D{d}", n, n) for d, n in enumerate(t.shape)), True)
             for k, t in enumerate(operands)]
    return render_expr(name, exprs, attrs, masks=lambda dims: None).text


def test_every_op_has_a_lowering():
    missing = [n for n, d in OPS.items() if not template(n) and not d.decompose]
    assert not missing, f"ops with neither a Triton template nor a decomposition: {missing}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_lowering_means_the_op(name):
    shapes, attrs = ARGS.get(name, ([(3, 4)], {}))
    gen = torch.Generator().manual_seed(0)
    operands = [torch.rand(s, generator=gen, dtype=torch.float64) + 0.5 for s in shapes]
    blocks = {f"BLOCK_A{k}D{d}": n for k, t in enumerate(operands) for d, n in enumerate(t.shape)}  # constexprs
    got = eval(render(name, operands, attrs), {"tl": TL}, {f"a{k}": t for k, t in enumerate(operands)} | blocks)
    want = OPS[name].torch_fn(*operands, **attrs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_silu_is_not_sigmoid_and_binary_ops_differ():
    x = torch.tensor([2.0], dtype=torch.float64)
    silu = eval(render("silu", [x], {}), {"tl": TL}, {"a0": x})
    assert silu.item() == pytest.approx(2.0 / (1 + math.exp(-2.0)))
    a, b = torch.tensor([6.0]), torch.tensor([3.0])
    results = {n: eval(render(n, [a, b], {}), {"tl": TL}, {"a0": a, "a1": b}).item()
               for n in ("add", "sub", "mul", "div")}
    assert results == {"add": 9.0, "sub": 3.0, "mul": 18.0, "div": 2.0}
