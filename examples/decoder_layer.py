"""A Llama-style decoder layer at decode size, in plain torch, compiled with `torch.compile(backend="prism")`.

One new token per sequence: RMSNorm, Q/K/V projections, attention over a KV cache, output projection and
residual, RMSNorm, SwiGLU MLP and residual. Run it to see what Prism fused and what it left to torch:

    python examples/decoder_layer.py            # small sizes; on a GPU: --dim 4096 --heads 32 --hidden 11008
"""

from __future__ import annotations

import argparse
import logging

import torch
import torch.nn.functional as F
from torch import nn


class DecoderLayer(nn.Module):
    """x [batch, dim] (one token per sequence) and a KV cache [batch * heads, length, dim / heads] each."""

    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 128, eps: float = 1e-6) -> None:
        super().__init__()
        self.heads, self.eps = heads, eps
        self.attn_norm = nn.Parameter(torch.rand(dim) + 0.5)
        self.mlp_norm = nn.Parameter(torch.rand(dim) + 0.5)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b, d = x.shape
        h, hd = self.heads, d // self.heads
        a = self.rms_norm(x, self.attn_norm)
        q = self.wq(a).view(b * h, 1, hd)
        k = torch.cat([k_cache, self.wk(a).view(b * h, 1, hd)], dim=1)
        v = torch.cat([v_cache, self.wv(a).view(b * h, 1, hd)], dim=1)
        att = torch.softmax(q @ k.transpose(1, 2) * hd ** -0.5, dim=-1) @ v
        x = x + self.wo(att.view(b, d))
        m = self.rms_norm(x, self.mlp_norm)
        return x + self.w_down(F.silu(self.w_gate(m)) * self.w_up(m))


def example(batch: int = 4, dim: int = 64, heads: int = 4, hidden: int = 128, length: int = 32,
            device: str = "cpu", dtype: torch.dtype = torch.float32) -> tuple[DecoderLayer, tuple[torch.Tensor, ...]]:
    """The layer and one decode step's inputs (a token per sequence, a KV cache of `length` tokens)."""
    torch.manual_seed(0)
    layer = DecoderLayer(dim, heads, hidden).to(device=device, dtype=dtype)
    hd = dim // heads
    x = torch.randn(batch, dim, device=device, dtype=dtype)
    k = torch.randn(batch * heads, length, hd, device=device, dtype=dtype) / hd ** 0.5
    v = torch.randn(batch * heads, length, hd, device=device, dtype=dtype)
    return layer, (x, k, v)


SHAPE = ("batch", "dim", "heads", "hidden", "length")
"""example()'s size arguments, in its order."""


def shape_arguments(ap: argparse.ArgumentParser, *defaults: int) -> None:
    """--batch, --dim, --heads, --hidden, --length with these defaults (this example's and the benchmark's)."""
    for name, default in zip(SHAPE, defaults, strict=True):
        ap.add_argument(f"--{name}", type=int, default=default)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(ap, 4, 64, 4, 128, 32)
    args = ap.parse_args()
    import prism.capture

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layer, inputs = example(*(getattr(args, n) for n in SHAPE), device,
                            torch.float16 if device == "cuda" else torch.float32)
    with torch.no_grad():
        want = layer(*inputs)
        got = torch.compile(layer, backend="prism")(*inputs)
    print(f"max |prism - eager| = {(got - want).abs().max().item():.2e}")
    for r in prism.capture.history[-1]["replaced"]:
        print(f"fused   {r['op']}: {len(r['ops'])} ATen ops ({', '.join(sorted({o.split('.')[1] for o in r['ops']}))})")
    for r in prism.capture.history[-1]["left"]:
        print(f"torch   {r['what']}: {r['why']}")


if __name__ == "__main__":
    main()
