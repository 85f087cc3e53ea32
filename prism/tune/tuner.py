"""Choosing the best candidate: rank the space by the cost model, compile a budget of candidates, then
time them on a GPU, or (without one) keep the cost model's best of those that compiled cleanly.

The paper samples parameter assignments uniformly and profiles them all. Prism has a cost model that
ranks a point in well under a millisecond, so it ranks the whole space first and spends the costly
steps (compilation, profiling) on the model's best candidates plus a uniform random draw over all
(graph, params) pairs (`explore`), which keeps the search honest where the model is wrong and gives
the rank correlation between model and measurement its spread. The unfused program (one generated
kernel per op) is always a candidate too: it is the baseline and the fallback. Candidates that can
overflow (prism.tune.safety) rank after every safe one and are chosen only when no safe one survives.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prism.errors import MappingError, PrismError
from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES
from prism.progress import Progress
from prism.progress import report as report_progress
from prism.tune.compile import CompileResult, compile_many
from prism.tune.cost import Cost, estimate
from prism.tune.report import COST_MODEL, GPU_PROFILE, UNFUSED, Entry, Report
from prism.tune.safety import overflow_risk
from prism.tune.space import Candidate, Space
from prism.tune.target import Target, get_target

__all__ = ["TuneError", "Tuned", "tune", "floor_seconds", "RANK_LIMIT"]

RANK_LIMIT = 4096
"""Points ranked by the cost model; a larger space is ranked on a uniform sample of this many."""
EXTRA_ROUNDS = 2
"""If no compiled candidate survives, this many more batches are taken from the ranking."""


class TuneError(PrismError):
    """Nothing could be tuned: no valid point, or no candidate that compiles and runs correctly."""


@dataclass
class Tuned:
    """The chosen concrete µGraph and the report of how it was chosen."""

    graph: KernelGraph
    report: Report


@dataclass(eq=False)
class _Pick:
    entry: Entry
    graph: KernelGraph
    cost: Cost


def floor_seconds(program: KernelGraph, target: Target) -> float:
    """Bytes a perfect kernel moves (inputs read once, outputs written once) over DRAM bandwidth."""
    tensors = program.inputs + program.output_tensors
    nbytes = sum(math.prod(t.shape) * TORCH_DTYPES[t.dtype].itemsize for t in tensors)
    return nbytes / target.dram_bandwidth


def tune(result, program: KernelGraph, *, budget: int = 16, seed: int = 0, gpu: bool = False,
         device: Any = None, target: Target | str | None = None, workers: int | None = None,
         compile: bool = True, explore: float = 0.25, rank_limit: int = RANK_LIMIT,
         log: Callable[[str], None] | None = None, progress: Progress | None = None, cluster: Any = None) -> Tuned:
    """Pick the best (graph, grid, loop) of `result` (a SearchResult) for `program`'s input shapes.

    budget: candidates compiled (and on a GPU, timed), the unfused baseline not counted.
    gpu: time candidates on `device` with do_bench; else rank them by the cost model.
    compile: compile candidates ahead of time for sm_90 (drops what fails or needs too much shared memory,
        and feeds the compiler's registers, shared memory and spills to the model); False ranks by the
        model alone (tests).
       log, progress: one line per step; (phase, done, total) as "compile" and "profile" advance.
    cluster: a prism.search.cluster.RayWorkers to compile on (Ray tasks), instead of local processes.
    """
    log = log or (lambda s: None)
    budget = max(1, int(budget))
    target = _gpu_target(device) if gpu else get_target(target)
    report = Report(GPU_PROFILE if gpu else COST_MODEL, target.name)
    report.floor_us = floor_seconds(program, target) * 1e6
    clock = _Clock()
    space = Space(result, program, target)
    ranked = _rank(space, rank_limit, seed, target, report, log)
    clock.lap("rank")
    seen: set[str] = set()
    picks = _select(space, ranked, budget, explore, seed, seen, target, report)
    base = _Pick(Entry(Candidate(UNFUSED, (), 1), "baseline", risk=overflow_risk(program)), program,
                 estimate(program, target))
    picks.append(base)
    for p in picks:
        p.entry.estimate_us = p.cost.seconds * 1e6
    if compile:
        taken = {id(p) for p in picks}
        _compile_until_one_survives(picks, [p for p in ranked if id(p) not in taken], budget, seen, target,
                                    workers, report, log, progress, cluster)
    else:
        for p in picks:
            p.entry.status = "ok"
        report.notes.append("candidates were not compiled ahead of time (compile=False): estimates use "
                            "estimated registers and shared memory")
    clock.lap("compile")
    if gpu:
        _profile(picks, program, device, report, seed, log, progress)
    clock.lap("profile")
    report.entries = [p.entry for p in picks]
    _choose(report, target)
    report.seconds = clock.laps | {"total": clock.total()}
    return Tuned(picks[report.chosen].graph, report)  # type: ignore[index]


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.time()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.time()
        self.laps[name] = now - self.last
        self.last = now

    def total(self) -> float:
        return time.time() - self.start


def _rank(space: Space, rank_limit: int, seed: int, target: Target, report: Report,
          log: Callable[[str], None]) -> list[_Pick]:
    """Phase 1: every point (or a uniform sample of `rank_limit`) estimated and sorted: the ones that cannot
    overflow first (prism.tune.safety), cheapest first; ties go to less shared memory, then to candidate
    order."""
    points = space.points()
    pool = points if len(points) <= rank_limit else space.sample(rank_limit, seed)
    ranked = [p for p in (_pick(space, c, "model", target, report) for c in pool) if p is not None]
    ranked.sort(key=lambda p: (p.entry.risk is not None, p.cost.seconds, sum(k.work.smem for k in p.cost.kernels),
                               p.entry.candidate))
    report.space = {"graphs": len(space.graphs), "points": len(points), "ranked": len(pool)}
    if not points:
        report.notes.append("no verified sGraph has a valid grid/loop point at these shapes: only the "
                            "unfused program (one generated kernel per op) is left")
    log(f"space: {len(points)} points over {len(space.graphs)} sGraphs; ranked {len(pool)}")
    return ranked


def _select(space: Space, ranked: list[_Pick], budget: int, explore: float, seed: int, seen: set[str],
            target: Target, report: Report) -> list[_Pick]:
    """Phase 2: the model's best distinct kernels, plus a seeded uniform draw over all points."""
    n_random = min(budget - 1, round(budget * explore)) if budget > 1 else 0
    picks = _take(ranked, budget - n_random, seen)
    points = space.points()
    order = list(range(len(points)))
    random.Random(seed).shuffle(order)
    for i in order:
        if n_random <= 0:
            break
        p = _pick(space, points[i], "random", target, report)
        if p is not None and _fresh(p, seen):
            picks.append(p)
            n_random -= 1
    return picks


def _compile_until_one_survives(picks: list[_Pick], rest: list[_Pick], budget: int, seen: set[str],
                                target: Target, workers: int | None, report: Report,
                                log: Callable[[str], None], progress: Progress | None, cluster: Any = None) -> None:
    """Phase 3: compile every pick; if no fused one survives, compile more from the ranking (picks
    grows in place, the baseline staying last)."""
    _compile(picks, target, workers, report, log, progress, cluster)
    rounds = 0
    while not any(p.entry.ok for p in picks[:-1]) and rest and rounds < EXTRA_ROUNDS:
        more = _take(rest, budget, seen)
        taken = {id(p) for p in more}
        rest = [p for p in rest if id(p) not in taken]
        for p in more:
            p.entry.estimate_us = p.cost.seconds * 1e6
        report.notes.append(f"no compiled candidate survived; compiled {len(more)} more from the ranking")
        _compile(more, target, workers, report, log, progress, cluster)
        picks[-1:-1] = more
        rounds += 1


def _gpu_target(device: Any) -> Target:
    """The Target of the CUDA device candidates are timed on (its name and compute capability)."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return get_target(torch.cuda.get_device_name(device)).with_(arch=10 * major + minor)


def _pick(space: Space, c: Candidate, origin: str, target: Target, report: Report) -> _Pick | None:
    try:
        g = space.instantiate(c)
    except MappingError as e:  # the space promised this point instantiates: a bug worth seeing
        report.notes.append(f"{c} is in the space but did not instantiate: {e}")
        return None
    return _Pick(Entry(c, origin, risk=overflow_risk(g)), g, estimate(g, target))


def _fresh(p: _Pick, seen: set[str]) -> bool:
    """False if a candidate with the same concrete µGraph was already taken (sGraphs can coincide once
    their sizes are fixed, e.g. a loop of range 1)."""
    h = p.graph.structural_hash()
    if h in seen:
        return False
    seen.add(h)
    return True


def _shape(p: _Pick) -> tuple:
    """What the model sees of a candidate's launches: block counts (grid dims of size 1 dropped, so
    the same kernel over x or over y looks alike) and loop ranges."""
    return tuple((tuple(sorted(g for g in k.work.grid if g > 1)), k.work.loop) for k in p.cost.kernels)


def _take(ranked: Sequence[_Pick], n: int, seen: set[str]) -> list[_Pick]:
    """The first n distinct kernels of `ranked`: first one per launch shape (estimates often tie
    between a kernel and its twins over another grid dim or sGraph), then the rest in order."""
    out: list[_Pick] = []
    shapes: set[tuple] = set()
    for spread in (True, False):
        for p in ranked:
            if len(out) >= n:
                return out
            if any(p is q for q in out) or (spread and _shape(p) in shapes):
                continue
            if _fresh(p, seen):
                out.append(p)
                shapes.add(_shape(p))
    return out


def _compile(picks: list[_Pick], target: Target, workers: int | None, report: Report,
             log: Callable[[str], None], progress: Progress | None, cluster: Any = None) -> None:
    log(f"compiling {len(picks)} candidate(s) for sm_{target.arch}")
    def done(k: int) -> None:
        report_progress(progress, "compile", k, len(picks))

    done(0)
    try:
        results = compile_many([p.graph for p in picks], workers, target.arch, done, cluster)
    except Exception as e:  # a broken worker pool (e.g. an unguarded __main__ under spawn) or a lost Ray task
        report.notes.append(f"parallel compilation failed ({type(e).__name__}: {e}); compiled in this process")
        results = compile_many([p.graph for p in picks], 1, target.arch)
    for p, r in zip(picks, results):
        _judge(p, r, target)


def _judge(p: _Pick, r: CompileResult, target: Target) -> None:
    e = p.entry
    e.kernels = [k.to_json() for k in r.kernels]
    if not r.ok:
        e.status = f"dropped: does not compile ({r.error})"
        return
    big = [k for k in r.kernels if k.shared > target.smem_per_block]
    if big:
        e.status = f"dropped: {big[0].name} needs {big[0].shared} B shared memory > {target.smem_per_block}"
        return
    # A kernel that spills a little can still be the fastest: dropping such candidates once left a decoder
    # layer's norm + projection to the 8-kernel unfused program on an H100 (136 B stack frames, 2026-11-23).
    # The cost model charges spills (SPILL_PENALTY), and on a GPU the measurement decides.
    p.cost = estimate(p.graph, target, aot=r.kernels)
    e.estimate_us = p.cost.seconds * 1e6
    e.status = "ok"


def _profile(picks: list[_Pick], program: KernelGraph, device: Any, report: Report, seed: int,
             log: Callable[[str], None], progress: Progress | None) -> None:
    from prism.interp import run
    from prism.tune.profile import input_copies, random_inputs, spearman

    inputs = random_inputs(program, seed, device)
    want = run(program, [t.float().cpu() for t in inputs])[0]
    copies = input_copies(inputs)
    report_progress(progress, "profile", 0, len(picks))
    for k, p in enumerate(picks, 1):
        if p.entry.ok:
            _time_one(p, inputs, want, copies, device, report)
            if p.entry.measured_us is not None:
                log(f"{p.entry.label}: {p.entry.measured_us:.2f} us")
        report_progress(progress, "profile", k, len(picks))
    pairs = [(p.entry.estimate_us, p.entry.measured_us) for p in picks
             if p.entry.measured_us is not None and p.entry.estimate_us is not None]
    report.spearman = spearman([a for a, _ in pairs], [b for _, b in pairs])
    report.notes.append(f"Spearman rank correlation of cost-model estimates and measured medians over "
                        f"{len(pairs)} candidates: {'n/a' if report.spearman is None else f'{report.spearman:+.3f}'}")


def _time_one(p: _Pick, inputs: list, want: Any, copies: list, device: Any, report: Report) -> None:
    """Run one candidate's generated kernels, drop it if it fails or disagrees with the reference,
    else record its do_bench median."""
    import torch

    from prism.codegen import compile_graph
    from prism.tune.profile import bench, close

    try:
        cg = compile_graph(p.graph)
        got = cg(*inputs)[0]
        torch.cuda.synchronize(device)
    except Exception as e:
        p.entry.status = f"dropped: failed to run ({type(e).__name__}: {str(e)[:200]})"
        return
    good, err = close(got, want)
    if not good:
        p.entry.status = f"dropped: wrong output (relative error {err:.2e})"
        report.notes.append(f"{p.entry.label}: verified equal but its kernels disagree with the "
                            f"reference (relative error {err:.2e}): a code generation bug")
        return
    try:
        p.entry.measured_us = bench(cg, copies) * 1e6
    except Exception as e:
        p.entry.status = f"dropped: failed while timed ({type(e).__name__}: {str(e)[:200]})"


def _choose(report: Report, target: Target) -> None:
    gpu = report.method == GPU_PROFILE
    key = (lambda e: e.measured_us) if gpu else (lambda e: e.estimate_us)
    ok = [i for i, e in enumerate(report.entries) if e.ok and key(e) is not None]
    if not ok:
        reasons = "; ".join(f"{e.label}: {e.status}" for e in report.entries)
        raise TuneError(f"no candidate survived tuning ({reasons})")
    risky = [i for i in ok if report.entries[i].risk]
    if risky:
        safe = [i for i in ok if not report.entries[i].risk]
        report.notes.append(f"{len(risky)} of {len(ok)} surviving candidate(s) can overflow for large inputs "
                            f"(first: {report.entries[risky[0]].risk}); "
                            + ("they were set aside" if safe else "no safe candidate survived"))
        ok = safe or ok
    best = min(ok, key=lambda i: (key(report.entries[i]), i))
    report.chosen = best
    e = report.entries[best]
    e.status = "chosen"
    others = len(ok) - 1
    if gpu:
        report.reason = (f"fastest measured median ({e.measured_us:.2f} us) of {len(ok)} candidate(s) that "
                         f"compiled, ran and matched the reference")
    else:
        report.reason = (f"lowest cost-model estimate ({e.estimate_us:.2f} us on {target.name}) of "
                         f"{len(ok)} candidate(s)" + (" that compiled for sm_90"
                                                      if any(x.kernels for x in report.entries) else "")
                         + ("" if others else "; it was the only one"))
