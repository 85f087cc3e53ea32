"""Each registry op, run through the reference executor, against an independently written formula."""

import math

import pytest
import torch

import prism
from prism import interp
from prism.ir.ops import OPS

# Independent meanings (not the registry's torch_fn), with operand shapes and attributes per op.
EXPECTED = {
    "matmul": ([(2, 3, 5), (2, 5, 4)], {}, lambda a, b: torch.einsum("bij,bjk->bik", a, b)),
    "exp": ([(3, 4)], {}, lambda x: math.e ** x),
    "silu": ([(3, 4)], {}, lambda x: x / (1 + torch.exp(-x))),
    "gelu": ([(3, 4)], {}, lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
    "relu": ([(3, 4)], {}, lambda x: torch.where(x > 0, x, torch.zeros_like(x))),
    "sqrt": ([(3, 4)], {}, lambda x: x ** 0.5),
    "square": ([(3, 4)], {}, lambda x: x * x),
    "neg": ([(3, 4)], {}, lambda x: 0 - x),
    "add": ([(3, 4), (3, 1)], {}, lambda a, b: a + b.expand(3, 4)),
    "sub": ([(1, 4), (3, 4)], {}, lambda a, b: a.expand(3, 4) - b),
    "mul": ([(3, 4), (3, 4)], {}, lambda a, b: a * b),
    "div": ([(2, 3, 4), (2, 3, 1)], {}, lambda a, b: a / b.expand(2, 3, 4)),
    "sum": ([(3, 4, 5)], {"dim": -2}, lambda x: sum(x[:, j:j + 1, :] for j in range(4))),
    "max": ([(3, 4, 5)], {"dim": -2}, lambda x: torch.stack([x[:, j, :] for j in range(4)]).max(0).values[:, None]),
    "group_sum": ([(3, 6, 2)], {"dim": 1, "size": 2},
                  lambda x: x[:, 0:2, :] + x[:, 2:4, :] + x[:, 4:6, :]),
    "group_max": ([(3, 6, 2)], {"dim": 1, "size": 2},
                  lambda x: torch.maximum(torch.maximum(x[:, 0:2, :], x[:, 2:4, :]), x[:, 4:6, :])),
    "group_scale": ([(3, 6, 2), (3, 3, 2)], {"dim": 1, "size": 2},
                    lambda x, s: x * s[:, [0, 0, 1, 1, 2, 2], :]),
    "maximum": ([(3, 4), (3, 1)], {}, lambda a, b: torch.where(a > b, a, b.expand(3, 4))),
    "rms_norm": ([(3, 8)], {"eps": 1e-3},
                 lambda x: x / ((x * x).sum(-1, keepdim=True) / 8 + 1e-3) ** 0.5),
    "mul_scalar": ([(3, 4)], {"value": -0.25}, lambda x: x / -4),
    "add_scalar": ([(3, 4)], {"value": 1.5}, lambda x: x - (-1.5)),
    "sigmoid": ([(3, 4)], {}, lambda x: 1 / (1 + math.e ** -x)),
    "erf": ([(3, 4)], {}, lambda x: torch.special.erf(x)),
}


def test_every_op_has_an_expected_meaning():
    assert set(EXPECTED) == set(OPS)


def _positive(shape, seed):
    # sqrt and div need positive operands; everything else is fine with them too
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5


@pytest.mark.parametrize("name", sorted(OPS))
def test_kernel_op_matches_formula(name):
    shapes, attrs, formula = EXPECTED[name]
    g = prism.KernelGraph()
    ins = [g.input(s, dtype="float32") for s in shapes]
    g.output(g.apply(name, ins, attrs))
    values = [_positive(s, k) for k, s in enumerate(shapes)]
    (got,) = interp.run(g, values, dtype=torch.float64)
    want = formula(*values)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(OPS))
def test_block_op_on_whole_tiles_matches_formula(name):
    """The same op inside a one-block, one-iteration fused kernel means the same thing."""
    shapes, attrs, formula = EXPECTED[name]
    g = prism.KernelGraph()
    ins = [g.input(s, dtype="float32") for s in shapes]
    b = prism.BlockGraph(grid=(1,), loop=1)
    tiles = [b.accum(b.input(t)) for t in ins]
    b.output(b.apply(name, tiles, attrs))
    g.output(*g.custom(b, ins))
    values = [_positive(s, k) for k, s in enumerate(shapes)]
    (got,) = interp.run(g, values, dtype=torch.float64)
    torch.testing.assert_close(got, formula(*values), rtol=1e-12, atol=1e-12)


def test_op_methods_take_attributes_by_position_and_keyword():
    g = prism.KernelGraph()
    x = g.input((4, 6))
    assert g.sum(x, 1).shape == (4, 1)
    assert g.sum(x, dim=0).shape == (1, 6)
    assert g.rms_norm(x).type == g.rms_norm(x, eps=1e-6).type
    assert g.mul_scalar(x, 2.0).dtype == "float16"


def test_registry_entries_are_complete():
    for name, d in OPS.items():
        assert d.name == name and d.arity in (1, 2) and d.doc and callable(d.torch_fn)
        assert set(d.defaults) <= set(d.attrs)
        assert callable(getattr(prism.KernelGraph, name)) and callable(getattr(prism.BlockGraph, name))
