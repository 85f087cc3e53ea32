"""The small workload configs and search limits the tests share: one table, so fixtures and search tests agree."""

from __future__ import annotations

from typing import Any

import prism.workloads as wl

SMALL = {"n": 4, "d": 64}
SMALL_ATT = {"b": 2, "g": 4, "h": 32, "d": 16}

QUICK_LIMITS = {
    "rmsnorm": {"max_block_ops": 10, "max_grid": 1},
    "rmsnorm_mlp": {"max_block_ops": 12, "max_grid": 1},
    "swiglu": {"max_block_ops": 9, "max_grid": 2},
    "attention": {"max_block_ops": 9, "max_grid": 2},
    "qk_attention": {"max_block_ops": 10, "max_grid": 1},
}
"""Limits that keep each workload's search to about a second and still find fused kernels (the session
fixture that tuner and runtime tests share)."""

FUSED_LIMITS = {
    "rmsnorm": {"max_block_ops": 11, "max_grid": 2},
    "rmsnorm_mlp": {"max_block_ops": 16, "max_grid": 1},
    "swiglu": {"max_block_ops": 9, "max_grid": 2},
    "attention": {"max_block_ops": 9, "max_grid": 2},
    "qk_attention": {"max_block_ops": 10, "max_grid": 2},
}
"""Room for each workload's hand-written fused kernel (its ops and grid dims), no more: what the search tests
need to find it."""


def small_cfg(workload: Any) -> dict:
    """The small config of a workload (given by name or as a workload)."""
    w = wl.get(workload) if isinstance(workload, str) else workload
    return dict(SMALL) if w.dims == ("n", "d") else dict(SMALL_ATT)
