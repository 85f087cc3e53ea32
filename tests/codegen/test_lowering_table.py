"""Every op has a Triton lowering, and each lowering means what the op means.

The templates in the op table (`OpDef.triton`) are evaluated here with `tl` stood in for by torch
functions, and compared with the op's torch semantics, so a lowering that computes the wrong thing
(silu as sigmoid, a binary op that divides) fails without a GPU or even Triton."""

import math
from types import SimpleNamespace

import pytest
import torch

from prism.ir.ops import OPS

TL = SimpleNamespace(
    exp=torch.exp, sigmoid=torch.sigmoid, erf=torch.erf, sqrt=torch.sqrt,
    maximum=lambda a, b: torch.maximum(a, torch.as_tensor(b, dtype=a.dtype)),
    sum=lambda x, axis, keep_dims: x.sum(dim=axis, keepdim=keep_dims),
    dot=torch.matmul,
)

ARGS = {
    "matmul": ([(3, 5), (5, 4)], {}),
    "add": ([(3, 4), (3, 1)], {}), "sub": ([(1, 4), (3, 4)], {}),
    "mul": ([(3, 4), (3, 4)], {}), "div": ([(3, 4), (3, 1)], {}),
    "sum": ([(3, 4)], {"dim": 1}),
    "rms_norm": ([(3, 8)], {"eps": 1e-3}),
    "mul_scalar": ([(3, 4)], {"value": -0.25}), "add_scalar": ([(3, 4)], {"value": 1.5}),
}


def render(name, operands, attrs):
    """The op's template with operands named a0, a1 and attributes as literals, as the emitter renders."""
    shape = operands[0].shape
    fields = {k: (repr(v) if isinstance(v, float) else v) for k, v in attrs.items()}
    return OPS[name].triton.format(*(f"a{k}" for k in range(len(operands))), last=len(shape) - 1,
                                   n=repr(float(shape[-1])), extra="", **fields)


def test_every_op_has_a_lowering():
    missing = [n for n, d in OPS.items() if not d.triton]
    assert not missing, f"ops without a Triton lowering (OpDef.triton): {missing}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_lowering_means_the_op(name):
    shapes, attrs = ARGS.get(name, ([(3, 4)], {}))
    gen = torch.Generator().manual_seed(0)
    operands = [torch.rand(s, generator=gen, dtype=torch.float64) + 0.5 for s in shapes]
    got = eval(render(name, operands, attrs), {"tl": TL}, {f"a{k}": t for k, t in enumerate(operands)})
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
