"""Cost-model calibrations: a Target's rates and latencies fitted to kernel times measured on one GPU kind.

The cost model (prism.tune.cost) is a formula over a kernel's work (`KernelWork`: bytes, FLOPs, warps,
stages, blocks) and a Target's constants. The data-sheet constants rank candidates only roughly (Spearman
0.14-0.92 against the first H100 measurements), because what a kernel really gets (bytes in flight per
warp, the latency a pipelined iteration pays, what one SM pulls) is not on a data sheet. A calibration
holds those constants fitted to measured device times (prism.tune.fit fits them):

- `Calibration`: the fitted constants with where they came from, saved as versioned JSON in
  `prism/tune/data/<kind>.json`. `prism.tune.get_target` applies the file of its kind, so a machine
  without a GPU ranks with the constants measured on the GPU it tunes for.

This module reads and writes them and needs neither the cost model nor the targets (which load it): the
fitting, which runs the cost model, is prism.tune.fit.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism.errors import PrismError

__all__ = ["DATA", "FITTED", "VERSION", "Calibration", "CalibrationError", "load"]

VERSION = 1
"""The calibration file format; a file of another version is refused, never half-read."""
FORMAT = "prism.calibration"
DATA = Path(__file__).with_name("data")
"""Where the calibrations shipped with Prism live, one `<kind>.json` per GPU kind."""
FITTED = ("dram_bandwidth", "sm_bandwidth", "l2_bandwidth", "dram_latency", "warp_inflight", "iteration_latency",
          "loop_overhead", "launch", "vector_flops", "tensor_flops", "warp_cost", "spill_slope")
"""The Target fields a calibration sets (not `spill_penalty`: prism.tune.cost says why)."""


class CalibrationError(PrismError):
    """A calibration file that cannot be used: missing fields, another format version, bad values."""


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
