"""The paper's benchmarks, reproduced, and every other program end to end: search tables, the generality table
(the choice and its numeric check per program), GPU kernel times; saved, resumed, reported (`prism.bench`).

`run(out_dir)` measures whatever `out_dir/results.json` lacks, saving after every measurement (a full
run takes hours and an interrupted one resumes where it stopped), then writes `report.md` and its
plots there; `write_report(results, out_dir)` rewrites the report from saved results alone.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import prism.workloads as wl
from prism.bench.generality import measure_choices
from prism.bench.gpu import GPUOptions, GPUUnavailable, measure_gpu, require_gpu
from prism.bench.paper_report import machine, write_report
from prism.bench.paper_search import SEARCHES, Plan, measure_search
from prism.errors import InputError
from prism.outputs import write_text

__all__ = ["GPUOptions", "GPUUnavailable", "Plan", "load_results", "run", "write_report"]


def run(out_dir: str | os.PathLike[str], *, workloads: Sequence[str] | None = None, mirage: bool = True,
        mirage_limit: float = 300.0, ablation: bool = True, ablation_limit: float = 1800.0,
        time_limit: float = 3600.0, generality: bool = True, gpu: bool | None = None,
        gpu_options: GPUOptions = GPUOptions(), workers: int | None = None,
        progress: Callable[[str], None] | None = None, command: str | None = None) -> dict[str, Any]:
    """Measure what `out_dir/results.json` lacks, save it there, and write the report beside it.

    workloads: names (default: every workload, the paper's five first); an unknown one is an InputError.
    mirage / ablation: also measure the Mirage-style search per config / the RMSNorm ablation; each
        `*_limit` is the time limit of one such search (time_limit: of one symbolic search).
    generality: also let the cost model choose each workload's kernel at its first config from its symbolic
        search, and check it numerically (prism.bench.generality; minutes: candidates are compiled).
    gpu: time the kernels too (None: when torch sees a CUDA GPU; True without one: GPUUnavailable); they
        are tuned from the symbolic searches saved in `out_dir/searches` unless gpu_options names a folder.
    workers: search processes (default: all cores). progress: called with one line per step.
    command: how this run was started, for the report (default: this call, spelled out).
    Returns the saved results (records by run key, plan, machine, date, command, the choices by workload and
    the GPU rows, if measured) and
    "files": every path written.
    """
    plan = Plan(tuple(wl.names() if workloads is None else workloads), mirage, mirage_limit, ablation,
                ablation_limit, time_limit, generality)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"benchmark output {str(out)!r} is a file; give a folder")
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    elif gpu:
        require_gpu()  # before hours of search, not after
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = load_results(path) if path.exists() else {"records": {}}
    results["plan"] = plan.to_json()
    command = command or _call(out, plan, gpu, workers)

    def write() -> None:
        write_text(path, json.dumps(results, indent=1, default=str))  # whole: an interrupted run resumes

    def measured(_: Any) -> None:
        """After each measurement: the machine, date and command are those of the latest one."""
        results.update(machine=machine(), command=command, date=time.strftime("%Y-%m-%d %H:%M:%S"))
        write()

    measure_search(plan, workers=workers, records=results["records"], save=measured, progress=progress, out=out)
    if plan.generality:
        measure_choices(plan, out, choices=results.setdefault("choices", {}), workers=workers, save=measured,
                        progress=progress)
    if gpu:
        if gpu_options.search_dir is None:  # tune from the searches the tables report
            gpu_options = replace(gpu_options, search_dir=str(out / SEARCHES))
        results["gpu"] = measure_gpu(list(plan.workloads), gpu_options, previous=results.get("gpu"), save=measured,
                                     progress=progress)
    write()
    return results | {"files": [path] + write_report(results, out)}


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The results saved at `path` by run(), or an InputError saying why they cannot be read."""
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read benchmark results {str(path)!r}: {e}") from None
    if not isinstance(results, dict) or not isinstance(results.get("records"), dict):
        raise InputError(f"benchmark results {str(path)!r}: not a results file written by prism.bench.run")
    return results


def _call(out: Path, plan: Plan, gpu: bool, workers: int | None) -> str:
    """This run as the Python call that repeats it."""
    args = ", ".join(f"{k}={v!r}" for k, v in plan.to_json().items())
    return f"prism.bench.run({str(out)!r}, {args}, gpu={gpu!r}, workers={workers!r})"
