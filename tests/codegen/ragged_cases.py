"""Ragged µGraphs for the interpreter runner: every workload with a dim whose last tile is partial (odd sizes,
prism.ir.block.split), and mutants of the two rules that make such kernels right (prism.codegen.layout).

A case's kernels must match the reference executor and torch; a mutant's (`Case.mutate` edits the generated
source) must not: the runner must fail it with wrong numbers, a non-finite output or a broken guard band."""

from __future__ import annotations

import re
from typing import Callable

import torch

import prism
from prism.workloads.attention import logit_scales
from tests.codegen.cases import Case

__all__ = ["MUTANTS", "RAGGED"]


def _case(name: str, cfg: dict[str, int], std: float | None = None, **params) -> Callable[[], Case]:
    """Workload `name`'s fused µGraph at `cfg` with `params` (grid/loop/splits), inputs in float16 (logits of
    standard deviation `std` for attention), checked against torch too."""
    def make() -> Case:
        w = prism.workloads.get(name)
        scales = logit_scales(cfg, std) if std else None
        return Case(w.fused(cfg, **params), w.inputs(cfg, 0, torch.float16, scales=scales), torch_reference=w.reference)
    return make


ROWS = {"n": 5, "d": 1000}
"""Rows n = 5 (padded to a tl.dot's 16) and d = 1000: grid and loop of 16 give tiles of 64, the last of 40."""


def _att(h: int, **extra: int) -> dict[str, int]:
    return {"b": 2, "g": 4, "h": h, "d": 96, **extra}


RAGGED: dict[str, Callable[[], Case]] = {
    "ragged_rmsnorm": _case("rmsnorm", ROWS, grid=16, loop=16),
    "ragged_rmsnorm_rows16": _case("rmsnorm", {"n": 16, "d": 1000}, grid=16, loop=16),
    "ragged_rmsnorm_mlp": _case("rmsnorm_mlp", ROWS, grid=16, loop=16),
    "ragged_swiglu": _case("swiglu", ROWS, grid=16, loop=16),
    "ragged_rmsnorm_linear": _case("rmsnorm_linear", {**ROWS, "o": 600}, grid=19, loop=16),   # o: 18·32 + 24
    "ragged_lora": _case("lora", {**ROWS, "r": 16, "o": 1000}, grid=16, loop=16),
    "ragged_ntrans": _case("ntrans", ROWS, grid=2),                          # rows in tiles of 4: 4 + 1
    "ragged_moe": _case("moe", {"e": 2, "n": 5, "d": 96, "f": 1000}, splits=2, loop=8),   # y summed: atomics
    "ragged_attention_exp_kv37": _case("attention", _att(37), splits=1, loop=3),   # exp(0) = 1 must not count
    **{f"ragged_attention_kv{h}": _case("attention", _att(h), 30.0, online=True, loop=loop)
       for h, loop in ((1, 1), (37, 3), (513, 5), (1000, 16))},                # 513 = 4·128 + 1
    # kv split by the grid and the loop; a head dim of 64 (kernel 2's groups are a power of two)
    "ragged_attention_split_kv1000": _case("attention", _att(1000, d=64), 30.0, online=True, splits=4, loop=4,
                                           partials=True),
    "ragged_attention_split_tail_kv513": _case("attention", _att(513, d=64), 30.0, online=True, splits=3, loop=11,
                                               partials=True, tail=True),      # 33 tiles of 16, the last of 1
    "ragged_qk_attention_kv513": _case("qk_attention", _att(513), 30.0, online=True, loop=5),
    "ragged_gqa_kv513": _case("gqa", {"b": 1, "k": 2, "g": 4, "h": 513, "d": 96}, 30.0, online=True, loop=5),
}


def _negative_logits() -> Case:
    """Online attention at kv = 37 (tiles of 16, the last of 5) whose logits are all about -400 (std 30): a
    running max that saw a padded logit as 0 instead of -inf would make every exp(s - m) underflow to 0."""
    case = _case("attention", _att(37), 30.0, online=True, loop=3)()
    q, kt, v = case.inputs
    q[..., 0], kt[..., 0, :] = -20.0, 20.0
    return case


RAGGED["ragged_attention_negative_logits"] = _negative_logits


def _mutant(base: Callable[[], Case], mutate: Callable[[str], str]) -> Callable[[], Case]:
    def make() -> Case:
        case = base()
        case.mutate = mutate
        return case
    return make


def _zero_max_pad(source: str) -> str:
    """Lanes past a ragged dim's extent padded with 0 instead of -inf before a max."""
    return source.replace(', float("-inf"))', ", 0.0)")


def _unmasked_store(source: str) -> str:
    """Stores without their mask."""
    return re.sub(r"(tl\.store\([^\n]*), mask=\w+\)", r"\1)", source)


def _lane_only_mask(source: str) -> str:
    """A ragged dim's mask comparing the lane, not the global index (tile start + lane), with the extent."""
    return re.sub(r"(mask_\w+ = )[^\n(]*\* \w+ \+ (tl\.arange\(0, \w+\) < EXTENT_\w+)", r"\1\2", source)


MUTANTS: dict[str, Callable[[], Case]] = {
    "mutant_zero_max_pad": _mutant(_negative_logits, _zero_max_pad),
    "mutant_unmasked_store": _mutant(RAGGED["ragged_rmsnorm_rows16"], _unmasked_store),   # rows unpadded
    "mutant_lane_only_mask": _mutant(RAGGED["ragged_attention_kv1000"], _lane_only_mask),
}
