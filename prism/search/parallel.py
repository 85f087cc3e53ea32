"""Tasks for the search's workers: generation subtrees and candidate checks, and the local worker pool.

Workers come from `prism.pool` (spawned; no main guard needed; killed at once on Ctrl-C), or are Ray
tasks (prism.search.cluster). Work crosses the process boundary as picklable values (sGraph states,
structures, mappings, the program as JSON); the verifier is passed as a function workers import by
name. Candidates are checked in two kinds of task: the numeric prefilter, one chunk of candidates each,
then the verifier and the cross-check on a batch of the ones left. A worker keeps what it learns about
a program (prefilter runs, verdicts) for its later tasks. Results come back in task order, so a
parallel run returns what a one-process run returns.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from prism import pool
from prism.ir import KernelGraph
from prism.ir.sizes import Constraint
from prism.search.check import Prefilter, cross_check
from prism.search.concrete import matches_fixed
from prism.search.generator import Generator, Limits
from prism.symbolic.closure import Target
from prism.symbolic.draft import Draft
from prism.symbolic.mapping import Mapping, enumerate_mappings
from prism.symbolic.structure import Structure, instantiate

__all__ = ["Check", "Checker", "Workers", "check_one", "concrete_task", "default_verify", "generate_task",
           "mirage_task", "prefilter_one", "prefilter_task", "running", "shutdown", "verify_all", "verify_task"]


_POOLS: dict[int, ProcessPoolExecutor] = {}
_STARTING = threading.Lock()


def _pool(n: int) -> ProcessPoolExecutor | None:
    """The pool of `n` workers, started once per process and reused by later searches (starting a
    worker imports torch and egglog, seconds each); None if work must stay in this process
    (prism.pool.unavailable: checked again at every search, since an op may have been registered since)."""
    with _STARTING:   # a background superoptimization (prism.capture.background) may ask at the same time
        if n not in _POOLS or pool.unavailable():
            started = pool.start(n, _worker_init)
            if started is None:
                return None
            _POOLS[n] = started
            if len(_POOLS) == 1:
                atexit.register(shutdown)
        return _POOLS[n]


def _worker_init() -> None:
    """Import the verifier (egglog and its thread pool come up here, in the worker) and keep torch to
    one thread: the workers are the parallelism, and each one's extra threads would only spin against
    the others' on the same cores (the prefilter's small runs were 9x slower on 2 cores with 2 workers)."""
    import torch

    import prism.verify  # noqa: F401

    torch.set_num_threads(1)


def running(n: int) -> Workers | None:
    """The search's `n` workers if they are running already (other work may then use them: the tuner's
    ranking without compiles), else None; starts nothing."""
    return Workers(n) if n > 1 and n in _POOLS and not pool.unavailable() else None


def shutdown() -> None:
    """Stop every worker process this module started."""
    while _POOLS:
        _POOLS.popitem()[1].shutdown(cancel_futures=True)


class Workers:
    """Runs tasks on `n` worker processes (default: all cores); with n == 1, or where workers cannot be
    started, in this process (`n` then says 1)."""

    def __init__(self, n: int | None = None) -> None:
        self.n = (os.cpu_count() or 1) if n is None else n

    def imap(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """(i, fn(*tasks[i])) for every task, as each finishes (in task order in this process). A lone task
        goes to workers only if they are running already (starting them would cost more than it saves; a
        verification here would import egglog, half a second, that they have)."""
        workers = self._started() if len(tasks) > 1 or running(self.n) else None
        if workers is None:
            return ((i, fn(*t)) for i, t in enumerate(tasks))
        return self._pooled(workers, fn, tasks)

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """fn(*task) for every task, results in task order; `done(i, result)` as each task i finishes."""
        return pool.collect(self.imap(fn, tasks), len(tasks), done)

    def start(self) -> None:
        """Start the worker processes now (each imports the verifier), so later calls do not wait."""
        self._started()

    def _pooled(self, workers: ProcessPoolExecutor, fn: Callable[..., Any],
                tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        try:
            yield from pool.completed(workers, fn, tasks)
        except BaseException:  # the pool was killed: the next search starts a fresh one
            _POOLS.pop(self.n, None)
            raise

    def _started(self) -> ProcessPoolExecutor | None:
        workers = _pool(self.n) if self.n > 1 else None
        if workers is None:
            self.n = 1
        return workers


def generate_task(target: Target, limits: Limits, deadline: float, modes: Any,
                  states: Sequence[Draft]) -> tuple[list[Structure], Counter]:
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


def default_verify() -> Callable[..., Any]:
    """`prism.verify.equivalent`, the e-graph checker."""
    from prism.verify import equivalent

    return equivalent


@dataclass(frozen=True)
class Checker:
    """How candidates are checked: the program (as JSON), the verifier, its timeout, the cross-check
    and prefilter switches. Picklable, so every worker builds the same checks."""

    program_doc: str
    verify: Callable[..., Any] | None
    """None: Prism's verifier (prism.verify.equivalent), imported by the process that verifies."""
    verify_timeout: float | None
    numeric: bool
    prefilter: bool


@dataclass
class _Program:
    """What a worker keeps per program: the graph, its input names, the prefilter (with its verdicts of
    one-dim runs) and the e-graph's verdicts by candidate terms, both shared by every later task."""

    graph: KernelGraph
    names: list[str]
    prefilter: Prefilter | None
    verdicts: dict = field(default_factory=dict)


_PROGRAMS: dict[tuple[str, bool], _Program] = {}


def _program(checker: Checker) -> _Program:
    """The program `checker` checks against, made once per worker process."""
    key = (checker.program_doc, checker.prefilter)
    if key not in _PROGRAMS:
        from prism.ir import serialize

        graph = serialize.loads(checker.program_doc, KernelGraph)
        _PROGRAMS[key] = _Program(graph, [t.name for t in graph.inputs],  # type: ignore[attr-defined]
                                  Prefilter(graph) if checker.prefilter else None)  # type: ignore[arg-type]
    return _PROGRAMS[key]


@dataclass(frozen=True)
class Check:
    """What checking one (structure, mapping) found, phase by phase: the prefilter's numeric run, then the
    verifier's verdict, then the cross-check of a verified one at two concrete parameter choices."""

    skipped: bool = False                 # past the search's deadline: not checked
    prefilter_s: float = 0.0
    prefiltered: bool = False             # rejected by the prefilter, never verified
    equal: bool | None = None             # the verifier's verdict (None: not yet verified)
    reason: str = ""                      # the verifier's words, or the failure that counts as a rejection
    error: bool = False                   # the verifier (or the instantiation) failed
    verify_s: float = 0.0
    numeric_ok: bool | None = None        # the cross-check of a verified one (None: not cross-checked)
    numeric_error: float | None = None
    numeric_detail: str | None = None
    check_s: float = 0.0
    constraints: tuple[Constraint, ...] = ()   # the size constraints a verified one's proof needs (prism.ir.sizes)

    @property
    def settled(self) -> bool:
        """Final: skipped, rejected by the prefilter, or verified or not."""
        return self.skipped or self.equal is not None

    def then(self, later: Check) -> Check:
        """`later` (the verifier's check of what this prefilter check let through) with this one's time."""
        return replace(later, prefilter_s=self.prefilter_s)


def prefilter_one(checker: Checker, st: Structure, m: Mapping) -> Check:
    """The prefilter's check of one (structure, mapping): `prefiltered` if a numeric run rejected it."""
    prog = _program(checker)
    t0 = time.perf_counter()
    rejected = prog.prefilter is not None and not prog.prefilter.passes(st, m, prog.names)
    seconds = time.perf_counter() - t0
    return Check(prefilter_s=seconds, prefiltered=True, equal=False, reason="numerically different") if rejected \
        else Check(prefilter_s=seconds)


def verify_all(checker: Checker, items: Sequence[tuple[Structure, Mapping]]) -> list[Check]:
    """Verify each (structure, mapping) on its size-free instance and cross-check the verified ones.

    Prism's own verifier checks them together (`prism.verify.equiv.equivalent_all`: one e-graph run,
    verdicts remembered by the candidates' terms), and proves the forms right only for some sizes
    (`Mapping.constrained`) under the size constraints it derives; another is called once per candidate. A
    verifier failure is a rejection, recorded with its reason."""
    prog = _program(checker)
    checks: list[Check] = [Check() for _ in items]
    cands = []
    for k, (st, m) in enumerate(items):
        try:
            cands.append((k, instantiate(st, m, names=prog.names, dtype=prog.graph.inputs[0].dtype)))
        except Exception as e:
            checks[k] = Check(equal=False, reason=f"{type(e).__name__}: {e}", error=True)
    kwargs = {} if checker.verify_timeout is None else {"timeout": checker.verify_timeout}
    t0 = time.perf_counter()
    verdicts = _batched(checker, prog, [c for _, c in cands], [items[k][1].constrained for k, _ in cands], kwargs)
    if verdicts is not None:
        share = (time.perf_counter() - t0) / max(1, len(cands))
        for (k, _), v in zip(cands, verdicts):
            checks[k] = Check(equal=bool(v.equal), reason=str(v.reason), verify_s=share,
                              constraints=tuple(v.constraints) if v.equal else ())
    else:
        for k, cand in cands:
            t0 = time.perf_counter()
            try:
                verdict = (checker.verify or default_verify())(prog.graph, cand, **kwargs)
                checks[k] = Check(equal=bool(verdict.equal), reason=str(verdict.reason))
            except Exception as e:
                checks[k] = Check(equal=False, reason=f"{type(e).__name__}: {e}", error=True)
            checks[k] = replace(checks[k], verify_s=time.perf_counter() - t0)
    if checker.numeric:
        for k, (st, m) in enumerate(items):
            if checks[k].equal:
                t1 = time.perf_counter()
                found = cross_check(prog.graph, st, m, prog.names)
                checks[k] = replace(checks[k], numeric_ok=found.ok, numeric_error=found.max_error,
                                    numeric_detail=found.detail, check_s=time.perf_counter() - t1)
    return checks


def _batched(checker: Checker, prog: _Program, cands: list[KernelGraph], constrained: list[bool],
             kwargs: dict) -> list[Any] | None:
    """Prism's verifier's verdicts on all candidates at once (the `constrained` ones in a batch of their own,
    proved under size constraints where they are not valid for all sizes); None for another verifier, or where
    a batch raised (then each candidate is checked alone, so the failure is recorded against its own)."""
    from prism.verify import equivalent
    from prism.verify.equiv import equivalent_all

    if checker.verify not in (None, equivalent) or not cands:
        return None
    out: list[Any] = [None] * len(cands)
    try:
        for flag in (False, True):
            ks = [k for k, c in enumerate(constrained) if c == flag]
            if ks:
                verdicts = equivalent_all(prog.graph, [cands[k] for k in ks], cache=None if flag else prog.verdicts,
                                          constrained=flag, **kwargs)
                for k, v in zip(ks, verdicts):
                    out[k] = v
    except Exception:
        return None
    return out


def check_one(checker: Checker, st: Structure, m: Mapping) -> Check:
    """Prefilter, verify on the size-free instance, and cross-check one (structure, mapping)."""
    first = prefilter_one(checker, st, m)
    return first if first.prefiltered else first.then(verify_all(checker, [(st, m)])[0])


def prefilter_task(checker: Checker, deadline: float,
                   items: Sequence[tuple[Structure, Mapping]]) -> list[Check]:
    """prefilter_one for each item until the deadline; later items are marked skipped."""
    return [Check(skipped=True) if time.time() > deadline else prefilter_one(checker, st, m) for st, m in items]


def verify_task(checker: Checker, deadline: float,
                items: Sequence[tuple[Structure, Mapping]]) -> list[Check]:
    """verify_all on the items (skipped, all of them, past the deadline)."""
    return [Check(skipped=True) for _ in items] if time.time() > deadline else verify_all(checker, items)


def mirage_task(target: Target, limits: Limits, deadline: float, modes: Any, labels: Any, sizes: Sequence[Any],
                checker: Checker) -> tuple[list[tuple[Structure, Mapping, dict]], Counter]:
    """Mirage's way: for each size choice, search structures from the concrete maps `labels` and check
    every concrete candidate as it is found (so a search stopped by its time limit keeps its finds)."""
    gen = Generator(target, limits, deadline, modes=modes)
    out: list[tuple[Structure, Mapping, Check]] = []
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
