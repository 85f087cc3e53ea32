"""`TuneOptions`: how `prism.tune.tune` chooses among a search's graphs, as one value (prism.options).

`tune`, `superoptimize` and the benchmarks pass one object; `tune(result, program, budget=8)` keeps working
(keyword arguments are changes to the options given).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from prism.errors import InputError, check_positive
from prism.options import Settings

__all__ = ["RANK_LIMIT", "RANK_SAMPLE", "SWEEP", "TuneOptions"]

RANK_LIMIT = 4096
"""Tilings ranked by the cost model at most (each at all its launches)."""
SWEEP = 256
"""On a GPU, a space of at most this many points is timed whole (TuneOptions.sweep): a few hundred kernels compile
in parallel on the tuner's workers, and every one measured leaves nothing to the model's guess."""
RANK_SAMPLE = 512
"""A space of more tilings is ranked from a sample of about this many, stratified by sGraph, and hill climbing
from its best (prism.tune.rank.climb), up to RANK_LIMIT tilings. On the ten workloads' configs this finds the best
estimate of ranking every tiling, within 0.1% (benchmarks/rank_climb.py). A uniform sample alone does not do:
at 1024, attention's (of 8112 tilings) missed every good split-KV tiling on an H100 (the unfused program won at
108 µs where 4096 points had found 15 µs: benchmarks/results/gpu_bench_tuning_h100.json), and at 4096
QK-Attention's best estimate was 14% over the whole space's."""


@dataclass(frozen=True)
class TuneOptions(Settings):
    """What a tuning tries and spends.

    budget: candidates compiled (and on a GPU, timed) before refinement, the unfused baseline not counted.
    seed: the random draw's and the sampled ranking's.
    explore: the share of the budget drawn at random among points near the model's best.
    rank_limit: tilings ranked by the cost model at most (RANK_LIMIT).
    rank_sample: a space of more tilings is ranked from a sample of about this many and climbing (RANK_SAMPLE).
    refine: neighbours of the best tried per refinement round (default: budget // 2 on a GPU, where
        measurements steer it; 0 without one, where it would only re-rank by the model at twice the
        compile time).
    time_budget: seconds after which no more candidates are refined (None: no limit); the first batch
        (the model's best, the random draw, the baseline) is always tried whole.
    compile: compile candidates ahead of time for sm_90 (drops what fails or needs too much shared memory,
        and feeds the compiler's registers, shared memory and spills to the model); False ranks by the
        model alone, in this process or on the search's worker processes if they are running.
    target: the GPU the cost model assumes without one (a Target, or "h100" (the default), "h200").
    strides: the strides the program's inputs are passed with, one tuple per input (None: every input
        row-major). A `Linear`'s weight is read transposed (its stored [out, in] seen as [in, out]: K
        contiguous): the cost model counts each tile's contiguous runs, which set its DRAM sectors, in the
        layout the kernel will read. torch.compile's backend gives the strides of what each region reads.
    sweep: on a GPU, a space of at most this many points is measured whole (every point compiled and timed)
        instead of `budget` of it: where the space is small, measuring beats the model's guess.
    """

    budget: int = 16
    seed: int = 0
    explore: float = 0.25
    rank_limit: int = RANK_LIMIT
    rank_sample: int = RANK_SAMPLE
    refine: int | None = None
    time_budget: float | None = None
    compile: bool = True
    target: Any = None
    strides: tuple[tuple[int, ...], ...] | None = None
    sweep: int = SWEEP

    WHAT: ClassVar[str] = "tuning options"

    def checked(self, who: str = "tune") -> TuneOptions:
        check_positive(who, "budget", self.budget, whole=True)
        check_positive(who, "rank_limit", self.rank_limit, whole=True)
        check_positive(who, "rank_sample", self.rank_sample, whole=True)
        if not isinstance(self.sweep, int) or isinstance(self.sweep, bool) or self.sweep < 0:
            raise InputError(f"{who}: sweep must be a whole number of points (0: never), got {self.sweep!r}")
        if self.strides is not None:
            if not isinstance(self.strides, (tuple, list)) or not all(
                    isinstance(t, (tuple, list)) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                         for n in t) for t in self.strides):
                raise InputError(f"{who}: strides must be one tuple of non-negative ints per input, got "
                                 f"{self.strides!r}")
        for name, low, high in (("explore", 0, 1), ("time_budget", 0, math.inf), ("refine", 0, math.inf)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not low <= value <= high):
                raise InputError(f"{who}: {name} must be a number from {low} to {high}, got {value!r}")
        return self if self.strides is None else dataclasses.replace(self, strides=tuple(map(tuple, self.strides)))
