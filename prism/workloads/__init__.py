"""The workloads: the paper's five, then others users bring (LoRA, RMSNorm-linear, GQA, nTrans, an MoE expert);
their configs, kernel graphs, torch references, inputs, fused forms, and what reports and tests need of them
(prism.workloads.base.Workload).

Configs are dicts: `n, d` for the three matmul workloads (X [n,d], weights [d,d]) and nTrans (three [n,d]
inputs); `b, g, h, d` for the two attention workloads (Q [b,g,d], Kt [b,d,h], V [b,h,d]; d is the head dim,
128 for real) and `b, k, g, h, d` for GQA (k KV heads, g query rows per KV head); `n, d, r, o` for LoRA
(X [n,d], W [d,o], A [d,r], B [r,o]); `n, d, o` for RMSNorm-linear (W [d,o]); `e, n, d, f` for the MoE
expert (X [e,n,d], W1 [e,d,f], W2 [e,f,d]).
"""

from __future__ import annotations

from prism.workloads.attention import ATTENTION, GQA, QK_ATTENTION
from prism.workloads.base import EPS, PaperFigures, Workload, WorkloadError
from prism.workloads.lora import LORA
from prism.workloads.mlp import RMSNORM, RMSNORM_LINEAR, RMSNORM_MLP, SWIGLU
from prism.workloads.moe import MOE
from prism.workloads.ntrans import NTRANS

__all__ = ["EPS", "WORKLOADS", "PaperFigures", "Workload", "WorkloadError", "get", "names", "paper_names"]

WORKLOADS: dict[str, Workload] = {w.name: w for w in (RMSNORM, RMSNORM_MLP, SWIGLU, ATTENTION, QK_ATTENTION, LORA,
                                                      RMSNORM_LINEAR, GQA, NTRANS, MOE)}


def names() -> list[str]:
    """Every workload name: the paper's five in its order, then the others."""
    return list(WORKLOADS)


def paper_names() -> list[str]:
    """The paper's five (the workloads with its figures), in its order."""
    return [n for n, w in WORKLOADS.items() if w.paper is not None]


def get(name: str) -> Workload:
    """The workload called `name`, or a WorkloadError that lists the known names."""
    if isinstance(name, str) and name in WORKLOADS:
        return WORKLOADS[name]
    raise WorkloadError(f"unknown workload {name!r}; known workloads: {', '.join(WORKLOADS)}")
