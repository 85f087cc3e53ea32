"""Cost-model calibration: a Target's rates and latencies fitted to kernel times measured on one GPU kind.

The cost model (prism.tune.cost) is a formula over a kernel's work (`KernelWork`: bytes, FLOPs, warps,
stages, blocks) and a Target's constants. The data-sheet constants rank candidates only roughly (Spearman
0.14-0.92 against H100 measurements, 2026-11-22), because what a kernel really gets (bytes in flight per
warp, the latency a pipelined iteration pays, what a spill costs) is not on a data sheet. A calibration
fits those constants to measured device times:

- `Sample`: one measured candidate, the kernels the model sees (with the compiler's warps, registers and
  shared memory) and its CUDA-graph replay time; `benchmarks/tune_calibrate.py` collects them on a GPU.
- `fit`: coordinate descent on log-scaled constants minimising the mean squared log ratio of estimate to
  measurement (deterministic; a ratio error weighs a 5 µs and a 50 µs kernel alike).
- `Calibration`: the fitted constants with where they came from, saved as versioned JSON in
  `prism/tune/data/<kind>.json`. `prism.tune.get_target` applies the file of its kind, so a machine
  without a GPU ranks with the constants measured on the GPU it tunes for.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from prism.errors import PrismError
from prism.tune.cost import KernelWork, cost_of
from prism.tune.target import Target

__all__ = ["DATA", "FITTED", "VERSION", "Calibration", "CalibrationError", "Sample", "fit", "held_out", "load",
           "log_error", "predict"]

VERSION = 1
"""The calibration file format; a file of another version is refused, never half-read."""
FORMAT = "prism.calibration"
DATA = Path(__file__).with_name("data")
"""Where the calibrations shipped with Prism live, one `<kind>.json` per GPU kind."""
FITTED = ("dram_bandwidth", "sm_bandwidth", "l2_bandwidth", "dram_latency", "warp_inflight", "iteration_latency",
          "loop_overhead", "launch", "spill_penalty", "vector_flops", "tensor_flops")
"""The Target fields a calibration sets."""
STEPS = (4.0, 2.0, 1.25, 1.05)
"""Multiplicative steps of the coordinate descent, coarse to fine."""
RANGE = 4.0
"""A fitted constant stays within this factor of its data-sheet value either way."""


class CalibrationError(PrismError):
    """A calibration file that cannot be used: missing fields, another format version, bad values."""


@dataclass(frozen=True)
class Sample:
    """One measured candidate: `group` is its program config (held-out correlation is per group)."""

    group: str
    label: str
    kernels: tuple[KernelWork, ...]
    measured_us: float

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "label": self.label, "measured_us": self.measured_us,
                "kernels": [k.to_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Sample:
        return cls(d["group"], d["label"], tuple(KernelWork.from_json(k) for k in d["kernels"]),
                   float(d["measured_us"]))


@dataclass(frozen=True)
class Calibration:
    """Fitted Target constants for one GPU kind (`kind`: "h100", "h200"), and where they came from."""

    kind: str
    device: str
    values: dict[str, float]
    source: dict[str, Any] = field(default_factory=dict)
    version: int = VERSION

    @property
    def digest(self) -> str:
        """A short fingerprint of the values: part of the target's name, so result caches keyed by it renew."""
        text = json.dumps(self.values, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def apply(self, target: Target) -> Target:
        return target.with_(name=f"{target.name}, calibrated {self.digest}", **self.values)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "kind": self.kind, "device": self.device,
                "values": dict(self.values), "source": self.source}

    @classmethod
    def from_json(cls, d: Any, where: str = "calibration") -> Calibration:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise CalibrationError(f"{where}: not a Prism calibration (format {FORMAT!r} expected)")
        if d.get("version") != VERSION:
            raise CalibrationError(f"{where}: calibration format version {d.get('version')!r}; this Prism reads "
                                   f"version {VERSION} (re-run benchmarks/tune_calibrate.py --fit)")
        values = d.get("values")
        if not isinstance(values, dict) or set(values) != set(FITTED):
            missing = sorted(set(FITTED) - set(values or {}))
            extra = sorted(set(values or {}) - set(FITTED))
            raise CalibrationError(f"{where}: values must set exactly {', '.join(FITTED)} (missing {missing}, "
                                   f"unknown {extra})")
        bad = [k for k, v in values.items() if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0]
        if bad:
            raise CalibrationError(f"{where}: values must be positive numbers; not so: {', '.join(bad)}")
        return cls(str(d.get("kind", "")), str(d.get("device", "")), {k: float(values[k]) for k in FITTED},
                   dict(d.get("source") or {}))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path


def load(path: str | Path) -> Calibration:
    """The calibration saved at `path`; CalibrationError naming the file if it is missing or unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    return Calibration.from_json(data, str(path))


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
    every constant times and divided by each step, keeping what lowers the error."""
    if not samples:
        raise CalibrationError("fit: no measured samples")
    values = {k: float(getattr(start, k)) for k in FITTED}
    best = log_error(samples, start)
    for _ in range(rounds):
        improved = False
        for step in STEPS:
            for k in FITTED:
                for factor in (step, 1 / step):
                    v = values[k] * factor
                    if not 1 / RANGE <= v / getattr(start, k) <= RANGE:
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
