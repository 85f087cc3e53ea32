"""The oracle: candidates measured on GPUs, kept so that a machine without one can check the tuner's picks.

A GPU calibration run (`benchmarks/tune_calibrate.py collect`) writes every candidate it measured: its config
(`group`), its kernels as the cost model sees them (`KernelWork`, with the compiler's warps, registers and
shared memory) and its CUDA-graph replay time. Those files, kept in `benchmarks/results/tune_samples_*.json`,
are the oracle. What counts is the measured time of the candidate the tuner picks, not the model's
correlation over samples: `regrets` gives, per config, the measured µs of the model's first choice over the
best measured (1.0: it picked the fastest of the measured candidates) beside Spearman's ρ of the model
against the measurements. tests/tune/test_oracle.py replays the current cost model over every stored config,
so a change that makes it pick a slower measured kernel fails there.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from prism.errors import InputError
from prism.tune.fit import Sample, fit, predict
from prism.tune.profile import spearman
from prism.tune.target import Target

__all__ = ["Regret", "left_out", "load", "regrets"]


@dataclass(frozen=True)
class Regret:
    """One config's replay: how many measured candidates, the regret of the model's pick, ρ, and the labels
    of the pick and of the fastest."""

    group: str
    candidates: int
    regret: float
    rho: float | None
    picked: str
    best: str


def load(paths: Sequence[str | Path]) -> list[Sample]:
    """The measured candidates in files written by `tune_calibrate.py collect` or `from-bench`, or an
    InputError naming the file that is not one. A config measured in more than one file stays one group per
    file, named "<config> [<file stem>]": runs on other days measure other candidates, on other code, and a
    regret is the model's pick among what one run measured."""
    files: list[tuple[str, list[Sample]]] = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            files.append((Path(path).stem, [Sample.from_json(s) for s in data["samples"]]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not a file of measured candidates ({type(e).__name__}: {e})") from None
    seen = Counter(group for _, samples in files for group in {s.group for s in samples})
    return [s if seen[s.group] == 1 else replace(s, group=f"{s.group} [{stem}]")
            for stem, samples in files for s in samples]


def regrets(samples: Sequence[Sample], target: Target) -> list[Regret]:
    """Per config (in order of first appearance), the model's pick on `target` against the measurements."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    out = []
    for group, members in groups.items():
        predicted = predict(members, target)
        pick = members[min(range(len(members)), key=predicted.__getitem__)]
        best = min(members, key=lambda s: s.measured_us)
        out.append(Regret(group, len(members), pick.measured_us / best.measured_us,
                          spearman(predicted, [s.measured_us for s in members]), pick.label, best.label))
    return out


def left_out(samples: Sequence[Sample], start: Target) -> list[Regret]:
    """Per config, the regret of a model calibrated (prism.tune.fit, from `start`) on the other configs only:
    how the model's form and fit do on a config they never saw, a guard against fitting the oracle."""
    groups = list(dict.fromkeys(s.group for s in samples))
    out = []
    for group in groups:
        fitted = start.with_(**fit([s for s in samples if s.group != group], start))
        out += regrets([s for s in samples if s.group == group], fitted)
    return out
