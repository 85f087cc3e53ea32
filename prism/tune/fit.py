"""Fitting a calibration (prism.tune.calibration): the cost model's constants against measured kernel times.

- `Sample`: one measured candidate, the kernels the model sees (with the compiler's warps, registers and
  shared memory) and its CUDA-graph replay time; `benchmarks/tune_calibrate.py` collects them on a GPU.
- `fit`: coordinate descent on log-scaled constants minimising the mean squared log ratio of estimate to
  measurement (deterministic; a ratio error weighs a 5 µs and a 50 µs kernel alike).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from prism.tune.calibration import FITTED, CalibrationError
from prism.tune.cost import KernelWork, cost_of
from prism.tune.target import Target

__all__ = ["BOUNDS", "RANGE", "STEPS", "Sample", "fit", "held_out", "log_error", "predict"]

STEPS = (4.0, 2.0, 1.25, 1.05)
"""Multiplicative steps of the coordinate descent, coarse to fine."""
RANGE = 4.0
"""A fitted constant stays within this factor of its data-sheet value either way, unless BOUNDS says."""
BOUNDS = {"dram_bandwidth": (0.8, 1.1)}
"""(lowest, highest) factors of the data-sheet value for constants measured directly: DRAM bandwidth stays
within 20% of the copy bandwidth and under the sheet's peak. Left free, the fit lowered it to 1.34 TB/s to
make up for errors of the model's form (prism.tune.cost), which then ranked the fastest kernels wrong."""


@dataclass(frozen=True)
class Sample:
    """One measured candidate: `group` is its program config (held-out correlation is per group), `label` the
    candidate as the tuner wrote it (its sGraph by index in the search that run tuned), `sgraph` that sGraph's
    identity (prism.search.result.SymbolicGraph.identity; empty where a file predates it): what names the form in
    another search of the same program."""

    group: str
    label: str
    kernels: tuple[KernelWork, ...]
    measured_us: float
    sgraph: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "label": self.label, "measured_us": self.measured_us,
                "kernels": [k.to_json() for k in self.kernels]} | ({"sgraph": self.sgraph} if self.sgraph else {})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Sample:
        return cls(d["group"], d["label"], tuple(KernelWork.from_json(k) for k in d["kernels"]),
                   float(d["measured_us"]), str(d.get("sgraph", "")))


def predict(samples: Sequence[Sample], target: Target) -> list[float]:
    """The model's µs for each sample's kernels on `target`."""
    return [cost_of(s.kernels, target).seconds * 1e6 for s in samples]


def log_error(samples: Sequence[Sample], target: Target) -> float:
    """Mean squared natural-log ratio of estimate to measurement."""
    if not samples:
        return 0.0
    return sum(math.log(p / s.measured_us) ** 2 for p, s in zip(predict(samples, target), samples)) / len(samples)


def fit(samples: Sequence[Sample], start: Target, rounds: int = 6) -> dict[str, float]:
    """The FITTED constants that minimise `log_error` over `samples`, from `start`'s values: each round tries
    every constant times and divided by each step, keeping what lowers the error. A constant `start` holds at 0
    is a term of the model turned off (`tune_calibrate.py regret --without`): it stays 0."""
    if not samples:
        raise CalibrationError("fit: no measured samples")
    values = {k: float(getattr(start, k)) for k in FITTED}
    best = log_error(samples, start)
    for _ in range(rounds):
        improved = False
        for step in STEPS:
            for k in (k for k in FITTED if values[k]):
                for factor in (step, 1 / step):
                    v = values[k] * factor
                    low, high = BOUNDS.get(k, (1 / RANGE, RANGE))
                    if not low <= v / getattr(start, k) <= high:
                        continue
                    err = log_error(samples, start.with_(**(values | {k: v})))
                    if err < best - 1e-12:
                        best, values[k], improved = err, v, True
        if not improved:
            break
    return values


def held_out(samples: Sequence[Sample], share: float = 1 / 3, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(fit, held-out): within each group a seeded shuffle holds `share` of the samples out."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    train: list[Sample] = []
    test: list[Sample] = []
    for name in sorted(groups):
        members = sorted(groups[name], key=lambda s: s.label)
        random.Random(f"{seed}:{name}").shuffle(members)
        k = round(len(members) * share)
        test += members[:k]
        train += members[k:]
    return train, test
