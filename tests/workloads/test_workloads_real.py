"""Each fused form at one of the paper's real configs (float32, default parameters) equals the reference.

The cheaper real config of each workload where there is a choice: the executor runs every block and
iteration in Python, and d = 4096 means 64 x 64 of them (the d = 4096 programs and their fused forms
are still built and range-checked in test_workloads_data.py)."""

import pytest
import torch

import prism.workloads as wl
from prism import interp

REAL = [
    ("rmsnorm", {"n": 8, "d": 1024}),
    ("rmsnorm_mlp", {"n": 16, "d": 1024}),
    ("swiglu", {"n": 8, "d": 1024}),
    ("attention", {"b": 2, "g": 8, "h": 8 * 2048, "d": 128}),
    ("qk_attention", {"b": 2, "g": 8, "h": 8 * 1024, "d": 128}),
]


@pytest.mark.parametrize("name, cfg", REAL)
def test_fused_at_a_real_config(name, cfg):
    w = wl.get(name)
    assert cfg in w.configs
    xs = w.inputs(cfg, seed=0, dtype=torch.float32)
    (got,) = interp.run(w.fused(cfg), xs, torch.float32)
    want = w.reference(*xs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
