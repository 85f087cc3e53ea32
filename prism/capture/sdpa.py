"""torch's scaled-dot-product attention ops as Prism programs: softmax(Q Kᵀ · scale + mask) V.

`F.scaled_dot_product_attention` reaches the ATen graph as one of several ops (the composite, the CPU flash
op, CUDA's flash, efficient and cuDNN ops, the math one), each with its own argument order and extra
results (log-sum-exp, seeds); all are read through their schema by argument name. Grouped-query attention
(more query heads than KV heads, `enable_gqa` or a CPU op that takes it as given) is written the way the GQA
workload is: Q [b, hq, s, e] viewed as [b, hk, g·s, e], the g = hq / hk query heads of each KV head as rows,
so K and V are read once per KV head and never repeated. `is_causal` becomes an additive mask input built by
torch from the shapes (prism.capture.views, step "causal"), with torch's top-left alignment; a float
`attn_mask` is added to the logits (expanded over the query heads of a group when hq > hk), and a boolean one
(True: attend) first becomes that float mask, 0 where it is True and -inf where not (step "additive"). Dropout,
or a result other than the output, leaves the cone with torch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from prism.capture.aten import Lowering, Unavailable, aten_op, broadcast, fold, op_name, reheld, softmax, wrap
from prism.capture.views import Pending, Source, Viewed
from prism.errors import UnsupportedOp
from prism.ir import Tensor

__all__ = ["ATTENTION_OPS"]

ATTENTION_OPS = ("aten.scaled_dot_product_attention.default",
                 "aten._scaled_dot_product_flash_attention_for_cpu.default",
                 "aten._scaled_dot_product_flash_attention.default",
                 "aten._scaled_dot_product_efficient_attention.default",
                 "aten._scaled_dot_product_cudnn_attention.default",
                 "aten._scaled_dot_product_attention_math.default")
"""The ATen spellings of attention that Prism lowers (prism.capture.partition counts each as two matmuls)."""


@aten_op(*ATTENTION_OPS)
def _attention(lw: Lowering, *args: Any, **kwargs: Any) -> Any:
    schema = lw.node.target._schema
    bound = dict(zip((a.name for a in schema.arguments), args)) | kwargs
    q, k, v = bound["query"], bound["key"], bound["value"]
    if bound.get("dropout_p", 0.0):
        raise lw.fail(f"dropout_p={bound['dropout_p']}: Prism is inference-only")
    mask = bound.get("attn_mask", bound.get("attn_bias"))
    out = attention(lw, q, k, v, mask, bool(bound.get("is_causal", False)), bound.get("scale"))
    results = len(schema.returns)
    return out if results == 1 else (out, *(Unavailable(f"result {i} of {op_name(lw.node)}")
                                            for i in range(1, results)))


def attention(lw: Lowering, q: Any, k: Any, v: Any, mask: Any, causal: bool, scale: float | None) -> Any:
    """softmax(q kᵀ · scale + mask) v for q [..., hq, s, e], k [..., hk, t, e], v [..., hk, t, ev]."""
    sq, sk, sv = (lw.shape(x) for x in (q, k, v))
    if not 3 <= len(sq) == len(sk) == len(sv):
        raise lw.fail(f"attention on shapes {list(sq)}, {list(sk)}, {list(sv)}")
    *lead, hq, s, e = sq
    hk, t = sk[-3], sk[-2]
    if hq % hk or sk[:-3] != tuple(lead) or sv[-3:-1] != (hk, t):
        raise lw.fail(f"attention: query {list(sq)} does not attend keys {list(sk)} and values {list(sv)}")
    g = hq // hk
    grouped = (*lead, hk, g * s, e)
    qt = lw.tensor(_as(lw, q, ("view", grouped), grouped))
    kt = lw.tensor(_as(lw, k, ("permute", (*range(len(sk) - 2), len(sk) - 1, len(sk) - 2)),
                       (*sk[:-2], e, t)))
    vt = lw.tensor(v)
    g_ = lw.graph
    logits = g_.mul_scalar(g_.matmul(qt, kt), float(scale) if scale is not None else 1 / math.sqrt(e))
    if causal:   # built by torch from an operand of the cone (its dtype and device; the sizes are given)
        like = next((x for x in (q, k, v) if isinstance(x, Pending)), None)
        if like is None:
            raise lw.fail("a causal mask needs the query, key or value as an input of the cone", q)
        bias = (1,) * (len(sq) - 2) + (g * s, t)
        causal_mask = Pending(Source(like.source.node).then("causal", (g, s, t, len(sq))), bias, like.dtype)
        logits = lw.tensor(broadcast(lw, "add", logits, causal_mask))
    if mask is not None:
        logits = lw.tensor(broadcast(lw, "add", logits, _grouped_mask(lw, mask, (*lead, hq, s, t), g)))
    out = g_.matmul(softmax(g_, logits, len(sq) - 1), vt)
    return wrap(out, (*lead, hq, s, sv[-1]))


def _as(lw: Lowering, x: Any, step: tuple[str, tuple[int, ...]], shape: tuple[int, ...]) -> Any:
    """Input `x` viewed (a cone input: the KV cache, a projection's heads, which stay with torch), or an
    intermediate reshaped (`reheld`: the query after RoPE, its heads regrouped for grouped-query attention)."""
    if tuple(lw.shape(x)) == tuple(shape) and step[0] == "view":
        return x
    if isinstance(x, Pending):
        return fold(x, step, shape)
    why = f"attention needs its operand {list(lw.shape(x))} as {list(shape)}, and it is an intermediate"
    if not isinstance(x, (Tensor, Viewed)) or step[0] != "view":
        raise lw.fail(why, x)
    try:
        return reheld(lw, x.t if isinstance(x, Viewed) else x, shape)
    except UnsupportedOp as e:
        raise lw.fail(f"{why}: {e}", x) from None


def _grouped_mask(lw: Lowering, mask: Any, full: tuple[int, ...], g: int) -> Any:
    """The additive mask broadcast against logits [..., hq, s, t], as the grouped logits [..., hk, g·s, t] read
    it: as it is without groups (g = 1), else expanded over the query heads and viewed into the groups."""
    if not isinstance(mask, Pending):
        raise lw.fail("an attention mask computed in the cone", mask)
    if mask.dtype == torch.bool:   # True: attend; as the additive mask 0 / -inf, made by torch at the input
        mask = Pending(mask.source.then("additive", ()), mask.shape, torch.float32)
    if not mask.dtype.is_floating_point:
        raise lw.fail(f"a {mask.dtype} attention mask; Prism adds float masks and reads boolean ones")
    if g == 1:
        return mask
    shape = (1,) * (len(full) - len(mask.shape)) + mask.shape
    hq, s = full[-3], full[-2]
    wide = (*shape[:-3], hq, s, shape[-1])                 # every query head and row: what the groups regroup
    grouped = (*shape[:-3], hq // g, g * s, shape[-1])
    m = fold(fold(mask, ("view", shape), shape), ("expand", wide), wide)
    return fold(m, ("view", grouped), grouped)
