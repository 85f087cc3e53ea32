"""`prism.from_torch`: plain torch programs captured as kernel graphs that the verifier proves equal to the
hand-built workloads; inputs, parameters and views; clear errors for what Prism cannot express."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import prism
import prism.workloads as wl
from prism.capture import capture
from prism.errors import InputError, UnsupportedOp
from prism.verify import equivalent

from tests.conftest import small_cfg


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


PLAIN = {  # each workload as a user writes it in torch, inputs in the workload's order
    "rmsnorm": lambda x, w: rms(x) @ w,
    "rmsnorm_mlp": lambda x, wu, wg: (rms(x) @ wu) * (rms(x) @ wg),
    "swiglu": lambda x, wg, wu: F.silu(x @ wg) * (x @ wu),
    "attention": lambda q, kt, v: torch.softmax(q @ kt, -1) @ v,
    "qk_attention": lambda q, kt, v: torch.softmax(rms(q) @ kt, -1) @ v,
}


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_torch_is_proven_equal_to_the_hand_built_workload(name):
    w = wl.get(name)
    cfg = small_cfg(name)
    graph = prism.from_torch(PLAIN[name], *w.inputs(cfg, seed=0))
    assert isinstance(graph, prism.KernelGraph)
    assert [t.name for t in graph.inputs] == list(PLAIN[name].__code__.co_varnames[:len(graph.inputs)])
    verdict = equivalent(w.build(cfg), graph)
    assert verdict.equal, verdict.reason


class Block(torch.nn.Module):
    """A module with parameters, a linear layer with bias (a transposed weight and a bias row), a weighted
    rms_norm and softmax in fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.Parameter(torch.rand(32) + 0.5)
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, x, q, k):
        h = F.rms_norm(x, (32,), self.norm, 1e-5)
        att = torch.softmax((q @ k).float(), -1)
        return F.gelu(self.proj(h)), att


def test_a_module_with_parameters_runs_like_torch_through_the_executor():
    torch.manual_seed(0)
    block = Block()
    x, q, k = torch.randn(4, 32), torch.randn(2, 3, 8), torch.randn(2, 8, 5)
    cap = capture(block, x, q, k)
    names = [t.name for t in cap.graph.inputs]
    assert names[0] == "x" and "norm" in names and "proj_weight" in names and "proj_bias" in names
    args = cap.arguments(x, q, k)
    by_name = dict(zip(names, args))
    assert by_name["proj_weight"].shape == (32, 16)            # the weight as the matmul reads it: transposed
    assert by_name["proj_bias"].shape == (1, 16)               # the bias as a row, broadcast by Prism
    with torch.no_grad():
        want = block(x, q, k)
    got = prism.interp.run(cap.graph, args)
    for g, t in zip(got, want):
        assert torch.allclose(g, t, rtol=1e-4, atol=1e-5)


def test_softmax_is_captured_max_subtracted_and_stays_finite_at_large_logits():
    """torch's softmax never overflows, and neither does its capture (the max is subtracted before exp);
    amax and maximum are captured as Prism's max and maximum."""
    x = torch.randn(4, 64) * 60                                # exp(x) overflows float32 above 88
    graph = prism.from_torch(lambda x: torch.softmax(x, -1), x)
    assert [n.op for n in graph.nodes if n.op != "input"] == ["max", "sub", "exp", "sum", "div"]
    (got,) = prism.interp.run(graph, [x])
    assert got.isfinite().all() and torch.allclose(got, torch.softmax(x, -1), atol=1e-6)
    user = lambda a, b: torch.maximum(a, b) - a.amax(-1, keepdim=True)
    b = torch.randn(4, 64)
    (got,) = prism.interp.run(prism.from_torch(user, x, b), [x, b])
    assert torch.equal(got, user(x, b))


@pytest.mark.parametrize("fn", [
    lambda x: torch.var_mean(x, -1, keepdim=True),
    lambda x: torch.var_mean(x, -1, correction=0),
    lambda x: x.var(-1, keepdim=True, unbiased=True) + x,
    lambda x: x.var(-1, keepdim=True, unbiased=False) + x,
    lambda x: torch.var_mean(x, (1, 2)),
], ids=["var_mean", "correction 0", "var unbiased", "var biased", "two dims"])
def test_variance_and_mean_are_captured_with_their_correction(fn):
    """var_mean (Inductor's decomposition of layer_norm) and var, in both spellings: the mean, and the centred
    squares summed over n - correction, with the shapes torch gives."""
    x = torch.randn(2, 6, 32)
    graph = prism.from_torch(fn, x)
    want = fn(x)
    want = want if isinstance(want, tuple) else (want,)
    got = prism.interp.run(graph, [x])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.reshape(w.shape), w)


@pytest.mark.parametrize("beta, alpha", [(1, 1), (1.0, 0.25), (0.5, 2.0), (0, 1)])
def test_baddbmm_is_the_scaled_product_plus_the_scaled_bias(beta, alpha):
    """BLOOM's attention scores: beta · bias + alpha · (a @ b), the bias broadcast over the rows; with beta 0 the
    bias is not read (torch ignores it, NaN included)."""
    a, b, bias = torch.randn(8, 5, 16), torch.randn(8, 16, 7), torch.randn(8, 1, 7)
    if beta == 0:
        bias[0, 0, 0] = float("nan")

    def scores(bias, a, b):
        return torch.softmax(torch.baddbmm(bias, a, b, beta=beta, alpha=alpha), -1)

    cap = capture(scores, bias, a, b)
    (got,) = prism.interp.run(cap.graph, cap.arguments(bias, a, b))
    torch.testing.assert_close(got.reshape(8, 5, 7), scores(bias, a, b))


@pytest.mark.parametrize("fn, op", [
    (lambda x: x.sort(-1).values @ x.t(), "aten.sort"),
    (lambda x: torch.sin(x) @ x, "aten.sin"),
    (lambda x: x.cumsum(-1) @ x, "aten.cumsum"),
    (lambda x: (x @ x).t() + 1, "a permute of an intermediate"),
    (lambda x: (x @ x).view(2, 32).sum(-1, keepdim=True), "splits a dim"),
    (lambda x: x ** 4 @ x, r"x \*\* 4"),
])
def test_what_prism_cannot_express_is_named_with_its_line(fn, op):
    with pytest.raises(UnsupportedOp, match=op) as err:
        prism.from_torch(fn, torch.randn(8, 8))
    assert "test_from_torch.py" in str(err.value)       # the user's source line


def test_bad_arguments_are_input_errors():
    with pytest.raises(InputError, match="function or torch.nn.Module"):
        prism.from_torch(3, torch.randn(2))
    with pytest.raises(InputError, match="example input tensors"):
        prism.from_torch(lambda x: x)
    with pytest.raises(InputError, match="torch.export could not capture"):
        prism.from_torch(lambda x: x * 2 if x.sum() > 0 else x, torch.randn(4, 4))
