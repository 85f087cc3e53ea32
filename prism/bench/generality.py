"""The generality table: every program end to end, as a user meets it.

Per program: Prism's symbolic search (seconds, unique verified graphs: the search record of the plan), the
candidate superoptimize chooses at the program's first config from that search, whether it matches the torch
reference numerically, and on a GPU its time beside torch eager and torch.compile.

Without a GPU the choice is the cost model's (prism.tune, candidates compiled ahead of time for sm_90), checked
through the reference executor: a *choice* record per program. With a GPU, the GPU benchmark's row of the first
config (prism.bench.gpu) carries the measured choice, its error and the times, and the table shows those.
The search results themselves are saved beside the report (`searches/<name>.json`), so a choice, and the GPU
benchmark, tune from the very search the table reports, and a resumed run does not search again.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable

import prism.workloads as wl
from prism.bench.gpu import num_text
from prism.bench.paper_search import NAMES, Plan, config_text, graphs_text, saved_or_searched, search_path, seconds_text

__all__ = ["CHOICE_BUDGET", "GENERALITY_COLUMNS", "generality_rows", "measure_choice", "measure_choices"]

CHOICE_BUDGET = 16
"""Candidates the cost model's choice compiles (`prism tune`'s default)."""

GENERALITY_COLUMNS = ["program", "config", "search s", "graphs", "chosen", "kernels", "chosen by", "numeric check",
                      "Prism graph µs", "eager graph µs", "compile graph µs", "compile/Prism"]


def _result(out: Path, plan: Plan, name: str, workers: int | None, say: Callable[[str], None]) -> Any:
    """The search of `name` the tables report (saved by `measure_search`), or a fresh one when there is none
    or it is stale."""
    run = plan.symbolic(name)
    return saved_or_searched(search_path(out, name), wl.get(name).build(run.cfg), lambda line: say(f"choice: {line}"),
                             modes=run.modes, time_limit=run.limit, workers=workers)


def measure_choice(name: str, result: Any, workers: int | None) -> dict[str, Any]:
    """superoptimize `name` at its first config from `result` by the cost model (no GPU timing), then the
    numeric check of the chosen kernel against the workload's torch reference."""
    from prism.runtime import superoptimize

    w = wl.get(name)
    cfg = w.configs[0]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "prism: no GPU", RuntimeWarning)  # the record says how it ran
        opt = superoptimize(w.build(cfg), search_result=result, budget=CHOICE_BUDGET, workers=workers, cache=False,
                            device="cpu")
    seconds = time.perf_counter() - t0
    check = opt.check(w.reference)
    rep = opt.report
    base = next(e for e in rep.entries if e.origin == "baseline")
    return {"workload": name, "cfg": cfg, "chosen": rep.best.label if rep.best else None,
            "kernels": len(opt.compiled.plan.steps), "estimate_us": rep.best.estimate_us if rep.best else None,
            "unfused_us": base.estimate_us, "method": rep.method, "target": rep.target, "check_ok": check["ok"],
            "relative_error": check["relative_error"], "superoptimize_s": seconds, "notes": list(rep.notes)}


def measure_choices(plan: Plan, out: Path, *, choices: dict[str, dict[str, Any]], workers: int | None = None,
                    save: Callable[[Any], None] | None = None,
                    progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """The cost model's choice of every workload of `plan` that `choices` lacks (by name), added as made."""
    from prism.tune.compile import kept_workers

    say = progress or (lambda line: None)
    with kept_workers():   # every workload's tuning compiles on the same workers
        for name in plan.workloads:
            if name in choices:
                continue
            say(f"choice {name} {config_text(wl.get(name).configs[0])} (cost model, budget {CHOICE_BUDGET}) ...")
            rec = choices[name] = measure_choice(name, _result(out, plan, name, workers, say), workers)
            if save is not None:
                save(choices)
            say(f"{name}: {rec['chosen']}, {rec['kernels']} kernel(s), estimated {num_text(rec['estimate_us'])} us "
                f"(unfused {num_text(rec['unfused_us'])} us); check {'ok' if rec['check_ok'] else 'MISMATCH'} "
                f"({rec['relative_error']:.1e}); {rec['superoptimize_s']:.1f} s")
    return choices


def _check_text(ok: bool, err: float) -> str:
    return f"{'ok' if ok else 'MISMATCH'} ({err:.0e})"   # the error relative to max(1, |out|)


def generality_rows(plan: Plan, records: dict[str, dict[str, Any]], choices: dict[str, dict[str, Any]],
                    gpu: dict[str, Any] | None) -> list[list[str]]:
    """One row per workload of `plan` (cells as text; '-': not measured). A GPU row of the first config wins
    over the cost model's choice: it was measured."""
    gpu_rows = {(r["workload"], config_text(r["config"])): r for r in (gpu or {}).get("rows", [])}
    out = []
    for name in plan.workloads:
        cfg = wl.get(name).configs[0]
        search = records.get(plan.symbolic(name).key)
        row = [NAMES[name], config_text(cfg), "-" if search is None else seconds_text(search),
               "-" if search is None else graphs_text(search)]
        g, c = gpu_rows.get((name, config_text(cfg))), choices.get(name)
        if g is not None and "error" not in g:
            err = g.get("prism_error")
            check = "n/a" if err is None else _check_text(err <= 2e-2, err)
            row += [g["chosen"], str(g["kernels"]), "GPU timing", check]
        elif c is not None:
            by = f"cost model: est. {num_text(c['estimate_us'])} µs, unfused {num_text(c['unfused_us'])} µs"
            row += [c["chosen"], str(c["kernels"]), by, _check_text(c["check_ok"], c["relative_error"])]
        else:
            row += ["-"] * 4 if g is None else [g["error"], "-", "-", "-"]
        times = [None if g is None else g.get(k) for k in ("prism_graph_us", "eager_graph_us", "compile_graph_us")]
        ratio = times[2] / times[0] if times[0] and times[2] else None
        row += [num_text(t, "{:.1f}") if g is not None else "-" for t in times]
        row.append(num_text(ratio, "{:.2f}x") if g is not None else "-")
        out.append([cell.replace("|", "/") for cell in row])
    return out
