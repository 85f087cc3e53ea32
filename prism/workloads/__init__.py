"""The paper's five workloads: their configs, kernel graphs, torch references, inputs and fused forms.

Configs are dicts: `n, d` for the three matmul workloads (X [n,d], weights [d,d]); `b, g, h, d` for
the two attention workloads (Q [b,g,d], Kt [b,d,h], V [b,h,d]; d is the head dim, 128 for real).
"""

from __future__ import annotations

from prism.workloads.attention import ATTENTION, QK_ATTENTION
from prism.workloads.base import EPS, Workload, WorkloadError
from prism.workloads.mlp import RMSNORM, RMSNORM_MLP, SWIGLU

__all__ = ["EPS", "WORKLOADS", "Workload", "WorkloadError", "get", "names"]

WORKLOADS: dict[str, Workload] = {w.name: w for w in (RMSNORM, RMSNORM_MLP, SWIGLU, ATTENTION, QK_ATTENTION)}


def names() -> list[str]:
    """The five workload names, in the paper's order."""
    return list(WORKLOADS)


def get(name: str) -> Workload:
    """The workload called `name`, or a WorkloadError that lists the known names."""
    if isinstance(name, str) and name in WORKLOADS:
        return WORKLOADS[name]
    raise WorkloadError(f"unknown workload {name!r}; known workloads: {', '.join(WORKLOADS)}")
