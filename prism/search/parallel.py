"""Tasks for the search's worker processes: generation subtrees and candidate checks.

Workers come from `prism.pool` (spawned; no main guard needed; killed at once on Ctrl-C). Work
crosses the process boundary as picklable values (sGraph states, structures, mappings, the program as
JSON); the verifier is passed as a function workers import by name. Results come back in task order,
so a parallel run returns what a one-process run returns.
"""

from __future__ import annotations

import atexit
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from prism import pool
from prism.ir import KernelGraph
from prism.search.check import Prefilter, cross_check
from prism.search.concrete import matches_fixed
from prism.search.generator import Generator, Limits
from prism.symbolic.closure import Target
from prism.symbolic.mapping import Mapping, enumerate_mappings
from prism.symbolic.sgraph import SGraph
from prism.symbolic.structure import Structure, instantiate

__all__ = ["Checker", "Workers", "check_one", "check_task", "concrete_task", "generate_task", "mirage_task",
           "shutdown"]


_POOLS: dict[int, ProcessPoolExecutor] = {}


def _pool(n: int) -> ProcessPoolExecutor | None:
    """The pool of `n` workers, started once per process and reused by later searches (starting a
    worker imports torch and egglog, seconds each); None if this process cannot start workers."""
    if n not in _POOLS:
        started = pool.start(n, _import_verifier)
        if started is None:
            return None
        _POOLS[n] = started
        if len(_POOLS) == 1:
            atexit.register(shutdown)
    return _POOLS[n]


def _import_verifier() -> None:
    import prism.verify  # noqa: F401  egglog and its thread pool come up here, in the worker


def shutdown() -> None:
    """Stop every worker process this module started."""
    while _POOLS:
        _POOLS.popitem()[1].shutdown(cancel_futures=True)


class Workers:
    """Runs tasks on `n` worker processes (default: all cores); with n == 1, or where workers cannot be
    started, in this process (`n` then says 1)."""

    def __init__(self, n: int | None = None) -> None:
        self.n = (os.cpu_count() or 1) if n is None else n

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[int], None] | None = None) -> list[Any]:
        """fn(*task) for every task, results in task order; `done(i)` as each task i finishes."""
        workers = self._started() if len(tasks) > 1 else None
        if workers is not None:
            try:
                return pool.run(workers, fn, tasks, done)
            except BaseException:  # run() killed the pool: the next search starts a fresh one
                _POOLS.pop(self.n, None)
                raise
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(*t))
            if done is not None:
                done(i)
        return out

    def start(self) -> None:
        """Start the worker processes now (each imports the verifier), so later calls do not wait."""
        self._started()

    def _started(self) -> ProcessPoolExecutor | None:
        workers = _pool(self.n) if self.n > 1 else None
        if workers is None:
            self.n = 1
        return workers


def generate_task(target: Target, limits: Limits, deadline: float, modes: Any,
                  states: Sequence[SGraph]) -> tuple[list[Structure], Counter]:
    """Explore the subtrees under `states` to the end; return what they emit and the counters."""
    gen = Generator(target, limits, deadline, modes=modes)
    found: list[Structure] = []
    for s in states:
        found.extend(gen.run(s))
    return found, gen.stats


def concrete_task(target: Target, limits: Limits, deadline: float, modes: Any,
                  labels: Any) -> tuple[list[Structure], Counter]:
    """One structure search from the concrete imap/fmap choice `labels` (the ablation modes)."""
    gen = Generator(target, limits, deadline, modes=modes)
    return list(gen.run(gen.start(labels))), gen.stats


_PROGRAMS: dict[str, tuple[KernelGraph, Prefilter | None]] = {}


def _program(doc: str, prefilter: bool) -> tuple[KernelGraph, Prefilter | None]:
    """The program (and its prefilter), made once per worker process."""
    if (doc, prefilter) not in _PROGRAMS:
        from prism.ir import serialize

        program = serialize.loads(doc, KernelGraph)
        _PROGRAMS[(doc, prefilter)] = (program, Prefilter(program) if prefilter else None)  # type: ignore
    return _PROGRAMS[(doc, prefilter)]  # type: ignore[index]


@dataclass(frozen=True)
class Checker:
    """How candidates are checked: the program (as JSON), the verifier, its timeout, the cross-check
    and prefilter switches. Picklable, so every worker builds the same checks."""

    program_doc: str
    verify: Callable[..., Any]
    verify_timeout: float | None
    numeric: bool
    prefilter: bool


def check_one(checker: Checker, st: Structure, m: Mapping) -> dict[str, Any]:
    """Prefilter, verify on the size-free instance, and cross-check one (structure, mapping)."""
    reference, pre = _program(checker.program_doc, checker.prefilter)
    names = [t.name for t in reference.inputs]
    rec: dict[str, Any] = {"skipped": False}
    t0 = time.perf_counter()
    if pre is not None and not pre.passes(st, m, names):
        return rec | {"prefiltered": True, "equal": False, "reason": "numerically different",
                      "prefilter_s": time.perf_counter() - t0}
    rec["prefilter_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        cand = instantiate(st, m, names=names, dtype=reference.inputs[0].dtype)
        kwargs = {} if checker.verify_timeout is None else {"timeout": checker.verify_timeout}
        verdict = checker.verify(reference, cand, **kwargs)
        rec["equal"], rec["reason"] = bool(verdict.equal), str(verdict.reason)
    except Exception as e:  # a verifier failure is a rejection, recorded with its reason
        rec["equal"], rec["reason"], rec["error"] = False, f"{type(e).__name__}: {e}", True
    rec["verify_s"] = time.perf_counter() - t0
    if rec["equal"] and checker.numeric:
        t1 = time.perf_counter()
        check = cross_check(reference, st, m, names)
        rec["numeric_ok"], rec["numeric_error"], rec["numeric_detail"] = check.ok, check.max_error, check.detail
        rec["check_s"] = time.perf_counter() - t1
    return rec


def check_task(checker: Checker, deadline: float, items: Sequence[tuple[Structure, Mapping]]) -> list[dict[str, Any]]:
    """check_one for each item until the deadline; later items are marked skipped."""
    return [{"skipped": True} if time.time() > deadline else check_one(checker, st, m) for st, m in items]


def mirage_task(target: Target, limits: Limits, deadline: float, modes: Any, labels: Any, sizes: Sequence[Any],
                checker: Checker) -> tuple[list[tuple[Structure, Mapping, dict]], Counter]:
    """Mirage's way: for each size choice, search structures from the concrete maps `labels` and check
    every concrete candidate as it is found (so a search stopped by its time limit keeps its finds)."""
    gen = Generator(target, limits, deadline, modes=modes)
    out: list[tuple[Structure, Mapping, dict]] = []
    for size in sizes:
        for st in gen.run(gen.start(labels)):
            problem = st.problem()
            for m in enumerate_mappings(problem, limits.max_grid):
                if matches_fixed(st, problem, m):
                    if time.time() > deadline:
                        return out, gen.stats
                    out.append((replace(st, sizes=size), m, check_one(checker, st, m)))
        if gen.stats.get("timed_out"):
            break
    return out, gen.stats
