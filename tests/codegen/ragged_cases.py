"""Ragged µGraphs for the interpreter runner: every workload with a dim whose last tile is partial (odd sizes,
prism.ir.block.split), kernels that take sizes at launch and run at many (RUNTIME), and mutants of the rules
that make such kernels right (prism.codegen.layout).

A case's kernels must match the reference executor and torch; a mutant's (`Case.mutate` edits the generated
source) must not: the runner must fail it with wrong numbers, a non-finite output or a broken guard band."""

from __future__ import annotations

import re
from typing import Callable

import torch

import prism
from prism.workloads.attention import logit_scales
from tests.codegen.cases import CASES, Case

__all__ = ["MUTANTS", "RAGGED", "RUNTIME"]


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
    # tiles wholly past the extent in the last block's later iterations: kv 129 in 4 blocks of 5 tiles of 8 (17
    # real: the last block holds 2, then 3 empty)
    "ragged_attention_split_empty_tiles_kv129": _case("attention", _att(129, d=64), 30.0, online=True, splits=4,
                                                      loop=5, partials=True),
    "ragged_attention_split_tail_empty_tiles_kv129": _case("attention", _att(129, d=64), 30.0, online=True,
                                                           splits=4, loop=5, partials=True, tail=True),
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


def _runtime(name: str, sizes: dict[tuple[int, int], str], configs: list[dict[str, int]],
             params: Callable[[dict[str, int]], dict], std: float | None = None) -> Callable[[], Case]:
    """Workload `name`'s fused µGraph at the first of `configs`, its kernels taking the input dims `sizes` names
    at launch, and run at every config: the µGraph there (`params(cfg)`: the same tiles, so as many parts as
    they take) is what the reference executor runs, the kernels are those generated at the first."""
    def make() -> Case:
        first, *others = (_case(name, cfg, std, **params(cfg))() for cfg in configs)
        first.sizes, first.others = sizes, others
        return first
    return make


def _tiles(extent: int, tile: int) -> int:
    return -(-extent // tile)


RUNTIME: dict[str, Callable[[], Case]] = {
    # kv walked by the loop in tiles of 16, its trip count counted at launch: kv = 1 (one iteration, one real
    # lane), a whole tile, one past it, and past the size it was generated at
    "runtime_attention_kv": _runtime("attention", {(1, 2): "kv", (2, 1): "kv"},
                                     [_att(h) for h in (37, 1, 5, 16, 17, 50, 100)],
                                     lambda c: {"online": True, "loop": _tiles(c["h"], 16)}, 30.0),
    # o split by grid dim x in tiles of 32 (blocks counted at launch, each writes its own columns), and the rows
    # n split by nothing (one tile, padded to the tl.dot's 16)
    "runtime_rmsnorm_linear": _runtime("rmsnorm_linear", {(0, 0): "n", (1, 1): "o"},
                                       [{"n": n, "d": 1000, "o": o} for n, o in ((5, 600), (1, 1), (3, 33), (16, 500),
                                                                               (7, 640))],
                                       lambda c: {"grid": _tiles(c["o"], 32), "loop": 16}),
}


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


def _extent_one_short(source: str) -> str:
    """The first extent a launcher passes at launch one less than the tensor's dim."""
    return re.sub(r"(\n {8})(\w+\.shape\[\d+\]),", r"\1\2 - 1,", source, count=1)


def _counts_floor(source: str) -> str:
    """Trip counts and grid blocks counted at launch rounded down (E // t) instead of up (cdiv(E, t))."""
    return re.sub(r"triton\.cdiv\((\w+\.shape\[\d+\]), (\d+)\)", r"\1 // \2", source)


def _slot_dropped(source: str) -> str:
    """A split-K combine that sums every partial of its tile but the first."""
    return re.sub(r"for j in range\(0, (\d+)\):  # in slot order", r"for j in range(1, \1):", source, count=1)


def _counter_kept(source: str) -> str:
    """A split-K combine that leaves its row counter where it ended: the next launch's last block never sees it."""
    return re.sub(r"tl\.store\((count\w*_ptr[^\n]*), 0\)  # zero again for the next launch", "pass", source)


def _one_slot(source: str) -> str:
    """Every block of a split stores its partial in slot 0: one overwrites the others'."""
    return re.sub(r"(tl\.store\(part\w*_ptrs) \+ \(([^)]*)\) \*", r"\1 + 0 *", source)


def _one_chunk(source: str) -> str:
    """A streamed matmul reads its first chunk of K for every chunk."""
    return re.sub(r"_ptrs \+ kk \* ", "_ptrs + 0 * ", source)


def _chunk_short(source: str) -> str:
    """A streamed matmul stops one chunk before the end of K."""
    return re.sub(r"range\(0, (BLOCK_\w+), (BLOCK_\w+C)\)", r"range(0, \1 - \2, \2)", source)


MUTANTS: dict[str, Callable[[], Case]] = {
    "mutant_zero_max_pad": _mutant(_negative_logits, _zero_max_pad),
    "mutant_unmasked_store": _mutant(RAGGED["ragged_rmsnorm_rows16"], _unmasked_store),   # rows unpadded
    "mutant_lane_only_mask": _mutant(RAGGED["ragged_attention_kv1000"], _lane_only_mask),
    "mutant_runtime_extent_one_short": _mutant(RUNTIME["runtime_attention_kv"], _extent_one_short),
    "mutant_runtime_trips_floor": _mutant(RUNTIME["runtime_attention_kv"], _counts_floor),
    "mutant_runtime_grid_floor": _mutant(RUNTIME["runtime_rmsnorm_linear"], _counts_floor),
    "mutant_split_slot_dropped": _mutant(CASES["split_gemv_m3_n5632_k2048_f32"], _slot_dropped),
    "mutant_split_counter_kept": _mutant(CASES["split_k"], _counter_kept),
    "mutant_split_one_slot": _mutant(CASES["split_k_norm_once"], _one_slot),
    "mutant_stream_one_chunk": _mutant(CASES["streamed_moe"], _one_chunk),
    "mutant_stream_chunk_short": _mutant(CASES["streamed_projection_before_the_loop"], _chunk_short),
}
