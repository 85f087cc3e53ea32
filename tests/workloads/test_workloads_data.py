"""References against direct torch formulas, and the inputs: deterministic, nonzero, fp16-safe."""

import pytest
import torch
import torch.nn.functional as F

import prism.workloads as wl
from prism import interp
from prism.ir import OPS

NAMES = wl.names()
FP16_MAX = torch.finfo(torch.float16).max


def small(w):
    return w.small_config


def _rmsn(x):
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6)


def _sdpa(q, kt, v):
    # softmax without max subtraction has the same value as torch's; scale=1 matches the paper's program
    return F.scaled_dot_product_attention(q, kt.transpose(-1, -2), v, scale=1.0)


def _gqa(q, kt, v):
    """torch's own GQA: each of Q's g rows per KV head as a query head of its own (b, k·g heads, one query),
    SDPA's enable_gqa pairing query head i with KV head i // g."""
    b, k, g, d = q.shape
    return F.scaled_dot_product_attention(q.reshape(b, k * g, 1, d), kt.transpose(-1, -2), v, scale=1.0,
                                          enable_gqa=True).reshape(b, k, g, d)


DIRECT = {
    "rmsnorm": lambda x, w: _rmsn(x) @ w,
    "rmsnorm_mlp": lambda x, wu, wg: (_rmsn(x) @ wu) * (_rmsn(x) @ wg),
    "swiglu": lambda x, wg, wu: (x @ wg) * torch.sigmoid(x @ wg) * (x @ wu),
    "attention": _sdpa,
    "qk_attention": lambda q, kt, v: _sdpa(_rmsn(q), kt, v),
    "lora": lambda x, w, a, b: torch.addmm(x @ w, x @ a, b),
    "rmsnorm_linear": lambda x, w: _rmsn(x) @ w,
    "gqa": _gqa,
    "ntrans": lambda h, x, alpha: _rmsn(torch.lerp(x, _rmsn(h), alpha)),
    "moe": lambda x, w1, w2: torch.bmm(torch.exp(torch.bmm(x, w1)), w2),
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reference_matches_direct_torch(name, seed):
    w = wl.get(name)
    xs = w.inputs(small(w), seed, torch.float64)
    torch.testing.assert_close(w.reference(*xs), DIRECT[name](*xs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_graph_matches_reference(name):
    w = wl.get(name)
    xs = w.inputs(small(w), 3, torch.float64)
    (got,) = interp.run(w.build(small(w)), xs, torch.float64)
    torch.testing.assert_close(got, w.reference(*xs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_reference_preserves_dtype(name, dtype):
    w = wl.get(name)
    out = w.reference(*w.inputs(small(w), 0, dtype))
    assert out.dtype == dtype
    assert out.shape == w.build(small(w)).output_tensors[0].shape


@pytest.mark.parametrize("name", NAMES)
def test_inputs_deterministic_nonzero_and_seed_dependent(name):
    w = wl.get(name)
    cfg = small(w)
    a, b, c = w.inputs(cfg, 7), w.inputs(cfg, 7), w.inputs(cfg, 8)
    shapes = [t.shape for t in w.build(cfg).inputs]
    assert [tuple(t.shape) for t in a] == shapes
    assert all(t.dtype == torch.float16 for t in a)
    assert all(torch.equal(s, t) for s, t in zip(a, b))
    assert all(not torch.equal(s, t) for s, t in zip(a, c))
    assert all((t != 0).all() and t.isfinite().all() for t in a)
    # the same values in every dtype (drawn in float32, then converted)
    f32, f64 = w.inputs(cfg, 7, torch.float32), w.inputs(cfg, 7, torch.float64)
    assert all(torch.equal(s, t.half()) for s, t in zip(a, f32))
    assert all(torch.equal(s.double(), t) for s, t in zip(f32, f64))
    assert all(t.dtype == torch.float32 for t in w.inputs(cfg, 7, "float32"))
    assert all(0.5 - 1e-6 <= (t.abs() / s).min() and (t.abs() / s).max() <= 1.5 + 1e-6
               for t, s in zip(f64, [w.scales_fn(cfg)[n] for n in w.input_names]))


def _intermediates(g, xs):
    """Every tensor of a kernel graph, computed in float32: fused kernels' outputs included."""
    values = dict(zip(g.input_refs, xs))
    for i, node in g.topo():
        args = [values[r] for r in node.inputs]
        if node.op == "custom":
            values.update(((i, k), t) for k, t in enumerate(interp.run_block(node.attrs["block"], args)))
        elif node.op != "input":
            values[(i, 0)] = OPS[node.op].torch_fn(*args, **node.attrs)
    return values


@pytest.mark.parametrize("name", NAMES)
def test_real_configs_fit_float16(name):
    """fp16 inputs, every kernel-graph tensor of the program and of the fused form within fp16 range
    (checked in float32, since fp16 matmul on a CPU is slow), and a true fp16 reference is finite at the
    smaller config (the larger takes seconds in fp16 and is covered by the float32 range check)."""
    w = wl.get(name)
    cheaper = min(w.configs, key=w.io_bytes)
    for cfg in w.configs:
        xs = w.inputs(cfg, 0)
        assert all((t != 0).all() and t.isfinite().all() for t in xs)
        x32 = [t.float() for t in xs]
        # kernel-level tensors do not depend on the fused parameters: the coarsest grid runs fastest
        coarse = {param: 1 for param in w.fused_params}
        for g in (w.build(cfg), w.fused(cfg, **coarse)):
            for ref, t in _intermediates(g, x32).items():
                assert t.isfinite().all() and t.abs().max() < FP16_MAX / 2, (cfg, ref)
        if cfg != cheaper:
            continue
        out = w.reference(*xs)
        assert out.dtype == torch.float16 and out.isfinite().all()
        torch.testing.assert_close(out.float(), w.reference(*x32), rtol=2e-2, atol=2e-2 * out.abs().max().item())


def test_attention_logits_are_order_one():
    w = wl.get("attention")
    q, kt, _ = w.inputs(w.configs[1], 0, torch.float32)
    s = q @ kt
    assert 0.3 < s.std() < 1.0 and s.abs().max() < 6
