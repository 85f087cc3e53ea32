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
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from prism.errors import InputError
from prism.tune.fit import Sample, fit, predict
from prism.tune.profile import spearman
from prism.tune.space import Candidate
from prism.tune.target import Target, gpu_kind

__all__ = ["Regret", "Step", "before_compile", "fastest", "left_out", "load", "read", "regrets", "steps"]


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


def load(paths: Sequence[str | Path], kind: str | None = None) -> list[Sample]:
    """The measured candidates in files written by `tune_calibrate.py collect` or `from-bench` (`read`'s)."""
    return read(paths, kind)[0]


def read(paths: Sequence[str | Path], kind: str | None = None) -> tuple[list[Sample], list[str]]:
    """The measured candidates in files written by `tune_calibrate.py collect` or `from-bench`, and the device
    each file names; or an InputError naming the file that is not one, or (given a GPU `kind`, "h100") that was
    measured on another kind of GPU: a calibration or a replay for one GPU from another's times would be silently
    wrong. A config measured in more than one file stays one group per file, named "<config> [<file stem>]": runs
    on other days measure other candidates, on other code, and a regret is the model's pick among what one run
    measured."""
    files = [_file(path, kind) for path in paths]
    seen = Counter(group for _, samples, _ in files for group in {s.group for s in samples})
    return [s if seen[s.group] == 1 else replace(s, group=f"{s.group} [{stem}]")
            for stem, samples, _ in files for s in samples], [device for _, _, device in files]


def _file(path: str | Path, kind: str | None) -> tuple[str, list[Sample], str]:
    """One file's (stem, samples, device): `read`'s refusals."""
    try:
        data = json.loads(Path(path).read_text())
        samples = [Sample.from_json(s) for s in data["samples"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a file of measured candidates ({type(e).__name__}: {e})") from None
    device = str(data.get("device", ""))
    if kind is not None and (not device or gpu_kind(device) != kind):
        raise InputError(f"{path}: measured on {device or 'an unnamed device'}, not on an {kind.upper()}")
    return Path(path).stem, samples, device


def fastest(paths: Sequence[str | Path], kind: str) -> dict[str, Sample]:
    """Per config ("rmsnorm n=8,d=4096"), the fastest candidate ever measured for it in the files of `paths`
    measured on GPUs of `kind` (files of other kinds are passed over, not refused), among those whose sGraph is
    named (`Sample.sgraph`). A tuning of that config on that kind of GPU times it again (TuneOptions.keep), so a
    run's pick is never a form slower than one measured before only because its draw missed it."""
    best: dict[str, Sample] = {}
    for path in paths:
        _, samples, device = _file(path, None)
        if not device or gpu_kind(device) != kind:
            continue
        for s in samples:
            if s.sgraph and (s.group not in best or s.measured_us < best[s.group].measured_us):
                best[s.group] = s
    return best


def before_compile(samples: Sequence[Sample], target: Target) -> list[Sample]:
    """`samples` as the tuner ranks them before anything is compiled: the registers and spills of each candidate's
    own kernels estimated from their live values at its warps (`KernelWork.with_launch`), not the compiler's; the
    compiler's shared memory is kept. Which points the tuner compiles at all (its first batch, the refinement's
    order) comes from this ranking, so its regret says how well the model picks where no compiler has been."""
    return [replace(s, kernels=tuple(k.with_launch(k.warps, k.stages, target) if k.fused else k for k in s.kernels))
            for s in samples]


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


@dataclass(frozen=True)
class Step:
    """Candidates of one config that differ in one launch field only (`field`: "warps", "stages" or "loop"),
    from value `low` to the next measured `high`: how many such pairs, and the geometric mean of measured and of
    predicted time ratios (high over low). A model that ranks that field right predicts the measured ratio."""

    field: str
    low: int
    high: int
    pairs: int
    measured: float
    predicted: float


def steps(samples: Sequence[Sample], target: Target, field: str) -> list[Step]:
    """Per step of `field` between neighbouring values, the measured and predicted ratios over every config's
    candidates that agree on everything else (sGraph, grid and the other fields): what the model gets wrong
    about one parameter, seen apart from the rest."""
    if field not in ("warps", "stages", "loop"):
        raise InputError(f"steps: field must be warps, stages or loop, not {field!r}")
    predicted = predict(samples, target)
    alike: dict[tuple, list[tuple[int, float, float]]] = defaultdict(list)
    for s, p in zip(samples, predicted):
        c = Candidate.parse(s.label)
        rest = replace(c, **{field: 0})
        alike[(s.group, str(rest))].append((getattr(c, field), s.measured_us, p))
    ratios: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for members in alike.values():
        members.sort()
        for (a, ma, pa), (b, mb, pb) in zip(members, members[1:]):
            if a != b:
                ratios[a, b].append((math.log(mb / ma), math.log(pb / pa)))
    return [Step(field, a, b, len(r), math.exp(sum(m for m, _ in r) / len(r)), math.exp(sum(p for _, p in r) / len(r)))
            for (a, b), r in sorted(ratios.items())]
