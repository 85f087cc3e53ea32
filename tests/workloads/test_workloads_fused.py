"""The hand-written fused µGraphs, run block by block by the reference executor, equal the references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import prism.workloads as wl
from prism import interp

MLP = ["rmsnorm", "rmsnorm_mlp", "swiglu"]
ATTENTION = ["attention", "qk_attention"]


def check(name, cfg, seed=0, **params):
    """Fused form at `cfg` and `params` against the torch reference, both in float64."""
    w = wl.get(name)
    xs = w.inputs(cfg, seed, torch.float64)
    (got,) = interp.run(w.fused(cfg, **params), xs, torch.float64)
    torch.testing.assert_close(got, w.reference(*xs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", MLP)
@pytest.mark.parametrize("cfg, params", [
    ({"n": 4, "d": 128}, {}),                       # defaults: 64-wide tiles, grid 2, loop 2
    ({"n": 4, "d": 128}, {"grid": 1, "loop": 1}),   # one block, one iteration: the whole matmul
    ({"n": 4, "d": 128}, {"grid": 8, "loop": 4}),
    ({"n": 4, "d": 128}, {"grid": 128, "loop": 128}),   # 1x1 weight tiles
    ({"n": 3, "d": 96}, {}),                        # default tile is gcd(96, 64) = 32
    ({"n": 1, "d": 6}, {"grid": 3, "loop": 2}),
])
def test_matmul_family(name, cfg, params):
    check(name, cfg, **params)


@pytest.mark.parametrize("name", ATTENTION)
@pytest.mark.parametrize("cfg, params", [
    ({"b": 2, "g": 4, "h": 256, "d": 16}, {}),                  # defaults: 4 tiles of 64, loop 4
    ({"b": 2, "g": 4, "h": 256, "d": 16}, {"splits": 4, "loop": 2}),    # split-KV: 4 blocks summed
    ({"b": 2, "g": 4, "h": 256, "d": 16}, {"splits": 256, "loop": 1}),
    ({"b": 2, "g": 4, "h": 256, "d": 16}, {"splits": 1, "loop": 256}),
    ({"b": 1, "g": 1, "h": 12, "d": 3}, {"splits": 3, "loop": 2}),
    ({"b": 3, "g": 2, "h": 96, "d": 8}, {"splits": 2}),
])
def test_attention_family(name, cfg, params):
    check(name, cfg, **params)


def _divisor(draw, n):
    return draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))


@st.composite
def matmul_case(draw):
    d = draw(st.sampled_from([4, 12, 16, 24, 32, 48]))
    return draw(st.sampled_from(MLP)), {"n": draw(st.integers(1, 5)), "d": d}, \
        {"grid": _divisor(draw, d), "loop": _divisor(draw, d)}


@st.composite
def attention_case(draw):
    h = draw(st.sampled_from([4, 8, 12, 24, 32, 64]))
    splits = _divisor(draw, h)
    cfg = {"b": draw(st.integers(1, 3)), "g": draw(st.integers(1, 4)), "h": h, "d": draw(st.integers(1, 8))}
    return draw(st.sampled_from(ATTENTION)), cfg, {"splits": splits, "loop": _divisor(draw, h // splits)}


@settings(max_examples=25, deadline=None)
@given(matmul_case(), st.integers(0, 2**16))
def test_matmul_family_any_valid_parameters(case, seed):
    name, cfg, params = case
    check(name, cfg, seed, **params)


@settings(max_examples=25, deadline=None)
@given(attention_case(), st.integers(0, 2**16))
def test_attention_family_any_valid_parameters(case, seed):
    name, cfg, params = case
    check(name, cfg, seed, **params)


@pytest.mark.parametrize("h", [1, 7, 64, 96, 200, 8192, 16384])
def test_default_split_divides_the_kv_length(h):
    from prism.workloads.attention import default_split

    splits, loop = default_split(h)
    assert h % (splits * loop) == 0 and h // (splits * loop) == math.gcd(h, 64)
