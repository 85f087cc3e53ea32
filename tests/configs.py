"""The small workload configs and search limits the tests share: one table, so fixtures and search tests agree."""

from __future__ import annotations

from typing import Any

import prism.workloads as wl

SMALL = wl.get("rmsnorm").small_config
SMALL_ATT = wl.get("attention").small_config

_LIMITS = {  # workload: (max_block_ops, max_grid) of a quick search, and of one with room for the fused kernel
    "rmsnorm": ((10, 1), (11, 2)),
    "rmsnorm_mlp": ((12, 1), (16, 1)),
    "swiglu": ((9, 2), (9, 2)),
    "attention": ((9, 2), (9, 2)),
    "qk_attention": ((10, 1), (10, 2)),
    "lora": ((10, 1), (10, 1)),
    "rmsnorm_linear": ((10, 1), (11, 2)),
    "gqa": ((9, 2), (9, 3)),
    "ntrans": ((10, 1), (10, 1)),
    "moe": ((7, 2), (7, 2)),
}


def limits(workload: str, fused: bool = False) -> dict:
    """Search limits for a workload: quick ones (each search about a second, still finding fused kernels: the
    session fixture tuner and runtime tests share), or, with `fused`, room for its hand-written fused kernel
    (its ops and grid dims, no more: what the search tests need to find it)."""
    ops, grid = _LIMITS[workload][fused]
    return {"max_block_ops": ops, "max_grid": grid}


def small_cfg(workload: Any) -> dict:
    """The small config of a workload (given by name or as a workload)."""
    w = wl.get(workload) if isinstance(workload, str) else workload
    return w.small_config
