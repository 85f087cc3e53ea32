"""Choosing the best candidate: rank the space by the cost model, compile and (on a GPU) time the
model's best plus a random share, then refine around the best so far; without a GPU, keep the cost
model's best of those that compiled cleanly.

The paper samples parameter assignments uniformly and profiles them all. Prism has a cost model that
ranks a point in well under a millisecond, so it ranks the space first (every tiling at every launch:
warps and stages; a large space from a sample and hill climbing, `prism.tune.rank.climb`; on the worker
processes that later compile) and spends the costly steps (compilation, profiling) on:

1. the model's best distinct kernels: each form's best first, then one per launch shape (`_take`);
2. a uniform random draw (`explore`) over the ranked points the model puts within `EXPLORE_BAND` times
   its best, which keeps the search honest where the model is wrong and gives the rank correlation between
   model and measurement its spread. Not over all points: most of a space is hopeless (estimates many
   times the best), and such points can take minutes to compile (QK-Attention's first batch compiled for
   275.6 s with draws over all points, 8.3 s with draws in the band: benchmarks/results/tune_compare.md).
   In a climbed space the ranked points are the sample (every sGraph's share) and the neighbourhoods climbed
   from, so the draw favours the model's good regions more than a draw over the whole band would. It skips
   points the compiler would mostly spill (`HEAVY`), the slowest to compile; no pick of any kind holds
   `TOO_HEAVY` times what a thread may (never near the fastest, and up to 23 s to compile);
3. the kept points (`TuneOptions.keep`): the fastest form ever measured for the config on this kind of GPU
   (prism.tune.oracle.fastest), found in this search by its sGraph's identity and tried at its stored point,
   whatever the model and the draw picked: a run's pick is then never slower than a form measured before only
   because its draw missed it (RMSNorm d=4096 on the H200 chose 21.13 µs in one run where another's draw had
   found a 17.45 µs split-K form);
4. refinement: the points one step from the best so far (`Space.neighbours`: a parallel size to the
   next value, warps halved or doubled, stages one more or less), best estimate first, and from the best of
   each other form within `REFINE_BAND` of it, for up to `REFINE_ROUNDS` rounds while they improve.

A `time_budget` (seconds) stops refinement once spent; the first batch is always compiled and timed
whole. On a GPU, candidates are timed as kernels replayed from a CUDA graph (device time: what the cost
model predicts, free of the host's launch path). The unfused program (one generated kernel per op) is
always a candidate too: it is the baseline and the fallback. Candidates that can overflow
(prism.tune.safety) rank after every safe one and are chosen only when no safe one survives. One pool
of worker processes serves the whole tuning (ranking, then every compile batch), so it starts once.
"""

from __future__ import annotations

import functools
import math
import random
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prism import pool
from prism.errors import InputError, MappingError, PrismError
from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES
from prism.options import RANK_LIMIT, RANK_SAMPLE, TuneOptions
from prism.progress import Progress
from prism.progress import report as report_progress
from prism.search.parallel import running
from prism.tune.compile import CompileResult, compile_many, default_workers, release, start_workers
from prism.tune.cost import Cost, estimate, overfull
from prism.tune.rank import Ranked, climb
from prism.tune.report import COST_MODEL, GPU_PROFILE, UNFUSED, Entry, Report, Status
from prism.tune.safety import overflow_risk
from prism.tune.space import Candidate, Space, located
from prism.tune.target import Target, device_target

__all__ = ["TuneError", "Tuned", "tune", "floor_seconds", "EXPLORE_BAND", "HEAVY", "TOO_HEAVY",
           "RANK_LIMIT", "RANK_SAMPLE", "REFINE_BAND", "REFINE_ROUNDS"]

EXPLORE_BAND = 4.0
"""The random share is drawn from the ranked points estimated within this factor of the model's best (the first
calibration's mean squared log error on held-out points was 0.58, as `benchmarks/tune_calibrate.py fit` printed
it: about a factor of 2 either way, so a point at 4x can still win)."""
HEAVY = 2.0
"""The random share skips a point with a kernel whose live values per thread (the model's register estimate)
exceed this many times the registers a thread may hold at its warps: the compiler spills most of it, it compiles
for long, and it is seldom fast. On an H100 host (the compile seconds in
benchmarks/results/gpu_bench_h100_2026-11-26_s7*.json) every candidate that compiled for 9-19 s was a random draw:
each held its batch, and a config's tuning, for that long; none was the fastest."""
TOO_HEAVY = 4.0
"""No pick at all (the model's, a refinement's) has a kernel whose live values per thread exceed this many times
the registers a thread may hold at its warps (prism.tune.cost.overfull). Of the 2013 candidates timed on the H100
and the H200 (benchmarks/results/tune_samples_*.json), the 29 so estimated measured 1.9-1019x the fastest of their
config (tests/tune/test_oracle.py computes it); in the H200 run of benchmarks/results/gpu_bench_h200_2026-11-27_d.json
two of them (nTrans n=64 at 2 blocks, picked by the model as its one-per-launch-shape pass went down the ranking)
compiled for 22.7 and 22.9 s, most of that config's 26 s of tuning."""
EXTRA_ROUNDS = 2
"""If no compiled candidate survives, this many more batches are taken from the ranking."""
REFINE_ROUNDS = 2
"""Rounds of refinement around the best candidate so far."""
REFINE_BAND = 1.5
"""Refinement also goes on from the best of each other form measured within this factor of the best: a form's
first pick is the model's, and the model is least to be trusted between forms (on an H100, in
benchmarks/results/gpu_bench_h100_2026-11-26_s7b.json: attention h=8192's split-KV partials pick measured
21.3 µs at 16 warps and loop 8, 1.2x the best, and the same form had measured 10.9 µs at 4 warps and loop 1 in an
earlier run). On a GPU host a batch compiles on as many workers as
cores, so the larger batch costs little more wall time than the best's neighbours alone."""


class TuneError(PrismError):
    """Nothing could be tuned: no valid point, or no candidate that compiles and runs correctly."""


@dataclass
class Tuned:
    """The chosen concrete µGraph and the report of how it was chosen."""

    graph: KernelGraph
    report: Report


@dataclass(eq=False)
class _Pick:
    """A candidate on its way: its report entry, the model's cost, and its µGraph."""

    entry: Entry
    cost: Cost
    graph: KernelGraph

    @property
    def fused(self) -> bool:
        return self.entry.candidate.graph != UNFUSED


def floor_seconds(program: KernelGraph, target: Target) -> float:
    """Bytes a perfect kernel moves (inputs read once, outputs written once) over the data sheet's DRAM
    bandwidth (not a calibration's: that is what kernels got, not what the chip can do)."""
    tensors = program.inputs + program.output_tensors
    nbytes = sum(math.prod(t.shape) * TORCH_DTYPES[t.dtype].itemsize for t in tensors)
    return nbytes / (target.peak_bandwidth or target.dram_bandwidth)


@pool.fewer_collections()
def tune(result, program: KernelGraph, options: TuneOptions | None = None, *, gpu: bool = False, device: Any = None,
         workers: int | None = None, log: Callable[[str], None] | None = None, progress: Progress | None = None,
         cluster: Any = None, **changes: Any) -> Tuned:
    """Pick the best (graph, grid, loop, warps, stages) of `result` (a SearchResult) for `program`'s shapes.

    options: what it tries and spends (prism.options.TuneOptions: budget, seed, refine, time_budget,
        compile, target, ...); keyword arguments change them (`tune(result, program, budget=8)`).
    gpu: time candidates on `device` (CUDA-graph replay); else rank them by the cost model.
    workers: worker processes for ranking and compiling (default: all cores).
    log, progress: one line per step; (phase, done, total) as "space", "rank", "compile" and "profile" advance.
    cluster: a prism.search.cluster.RayWorkers to rank and compile on (Ray tasks), instead of local processes.
    """
    opts = TuneOptions.of(options, "tune", **changes)
    budget, seed, compile = opts.budget, opts.seed, opts.compile
    log = log or (lambda s: None)
    refine = (budget // 2 if gpu else 0) if opts.refine is None else int(opts.refine)
    target = device_target(device if gpu else None, opts.target)
    report = Report(GPU_PROFILE if gpu else COST_MODEL, target.name)
    report.floor_us = floor_seconds(program, target) * 1e6
    clock = _Clock(opts.time_budget)
    n = default_workers() if workers is None else max(1, int(workers))
    started = start_workers(n) if compile and cluster is None else None
    # without compiles, ranking is the only parallel work: the search's workers take it if they are running
    shared = running(n) if started is None and cluster is None else None
    mapper = _Mapper(started, cluster, progress, report, shared)
    parallel = bool(started or cluster or shared)       # some workers take the space's and the ranking's tasks
    clock.lap("workers")
    try:
        space = Space(result, program, target, strides=opts.strides)
        space.tilings(functools.partial(mapper, phase="space") if parallel else None)
        clock.lap("space")
        ranked = _rank(space, opts, target, report, log, mapper, n if parallel else 1)
        clock.lap("rank")
        budget, explore, refine = _swept(len(space), gpu, opts, refine, report)
        seen: set[str] = set()
        picks = _select(space, ranked, budget, explore, seed, seen, target, report)
        picks += _kept(space, opts.keep, seen, target, report)
        base = _Pick(Entry(Candidate(UNFUSED, (), 1), "baseline", risk=overflow_risk(program)),
                     estimate(program, target, strides=opts.strides), program)
        picks.append(base)
        trial = _Trial(space, target, gpu, device, compile, workers, report, clock, seed, log, progress,
                       cluster, mapper.started)
        trial.run(picks)
        if compile:
            taken = {p.entry.candidate for p in picks}
            rest = [r for r in ranked if r.candidate not in taken]
            _until_one_survives(trial, space, picks, rest, budget, seen)
        if not compile and not gpu:
            report.notes.append("candidates were not compiled ahead of time (compile=False): estimates use "
                                "estimated registers and shared memory")
        _refine(trial, space, picks, refine, seen, target, report, clock, log)
    finally:
        release(started)
    if gpu:
        _correlation(picks, report)
    report.entries = [p.entry for p in picks]
    _choose(report, target)
    report.seconds = clock.laps | {"total": clock.total()}
    return Tuned(picks[report.chosen].graph, report)  # type: ignore[index]


class _Clock:
    """Seconds per phase (accumulated: compiling and timing alternate) and the time budget."""

    def __init__(self, budget: float | None = None) -> None:
        self.start = self.last = time.time()
        self.budget = budget
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.time()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last
        self.last = now

    def total(self) -> float:
        return time.time() - self.start

    def spent(self) -> bool:
        return self.budget is not None and self.total() >= self.budget


@dataclass
class _Mapper:
    """map(fn, tasks) for prism.tune.rank: on the tuning's worker pool, on Ray, on the search's running workers,
    or in this process; progress as `phase`. A pool that breaks is dropped (with a note) and the work done here."""

    started: ProcessPoolExecutor | None
    cluster: Any
    progress: Progress | None
    report: Report
    shared: Any = None
    """The search's running workers (prism.search.parallel.running), used when no pool of its own was started."""

    def __call__(self, fn: Callable[..., Any], tasks: Sequence[tuple], phase: str = "rank") -> list[Any]:
        def done(k: int) -> None:
            report_progress(self.progress, phase, k, len(tasks))

        done(0)
        finished = iter(range(1, len(tasks) + 1))
        if self.cluster is not None:
            return self.cluster.map(fn, tasks, lambda i, r: done(next(finished)))
        if self.started is None and self.shared is not None:
            return self.shared.map(fn, tasks, lambda i, r: done(next(finished)))
        if self.started is not None:
            try:
                return pool.run(self.started, fn, tasks, lambda i: done(next(finished)))
            except (BrokenProcessPool, OSError) as e:  # a worker died (pool.run killed the rest)
                self.started = None
                self.report.notes.append(f"the worker pool failed ({type(e).__name__}: {e}); ranked in this process")
                finished = iter(range(1, len(tasks) + 1))
        out = []
        for t in tasks:
            out.append(fn(*t))
            done(next(finished))
        return out


def _rank(space: Space, opts: TuneOptions, target: Target, report: Report, log: Callable[[str], None],
          mapper: _Mapper, workers: int) -> list[Ranked]:
    """Phase 1: every tiling at every launch, estimated and sorted; a space of more than `opts.rank_sample`
    tilings from a sample and hill climbing, at most `opts.rank_limit` tilings (prism.tune.rank.climb)."""
    tilings = space.tilings()
    ranked, notes, done = climb(space, [(gs.index, grid, loop) for gs, grid, loop in tilings],
                                min(opts.rank_sample, opts.rank_limit), opts.rank_limit, opts.seed, target, workers,
                                mapper)
    report.notes += notes
    points = len(space)
    report.space = {"graphs": len(space.graphs), "tilings": len(tilings), "points": points,
                    "tilings_ranked": done, "ranked": len(ranked)}
    report.forms = _forms(space, ranked)
    if not tilings:
        report.notes.append("no verified sGraph has a valid grid/loop point at these shapes: only the "
                            "unfused program (one generated kernel per op) is left")
    log(f"space: {points} points ({len(tilings)} tilings x launches) over {len(space.graphs)} sGraphs; "
        f"ranked {len(ranked)} ({done} tilings)")
    return ranked


def _forms(space: Space, ranked: list[Ranked]) -> dict[str, dict[str, Any]]:
    """Per form of the space's sGraphs that has ranked points (Report.forms), its best point as the tuner ranks
    them (safe first, then by estimate)."""
    graphs: dict[str, int] = {}
    for g in space.result.graphs:
        graphs[g.form] = graphs.get(g.form, 0) + 1
    best: dict[str, Ranked] = {}
    for r in ranked:
        form = space.form(r.candidate.graph, r.candidate.grid)
        if form not in best or r.order < best[form].order:
            best[form] = r
    return {form: {"graphs": graphs.get(form, 0), "best": str(r.candidate), "estimate_us": r.seconds * 1e6,
                   "safe": r.risk is None} for form, r in sorted(best.items(), key=lambda fr: fr[1].order)}


def _swept(points: int, gpu: bool, opts: TuneOptions, refine: int, report: Report) -> tuple[int, float, int]:
    """(budget, explore, refine) for a space of `points`: on a GPU, a space of at most `opts.sweep` points is
    swept (each point compiled and timed, but those the model puts over TOO_HEAVY registers: `_take`), and the
    report says so; else the options' own."""
    if not gpu or points > opts.sweep:
        return opts.budget, opts.explore, refine
    report.notes.append(f"a space of {points} points (at most sweep={opts.sweep}): every point compiled and timed")
    return points, 0.0, 0


def _select(space: Space, ranked: list[Ranked], budget: int, explore: float, seed: int, seen: set[str],
            target: Target, report: Report) -> list[_Pick]:
    """Phase 2: the model's best distinct kernels, plus a seeded uniform draw over the ranked points within
    EXPLORE_BAND of the best, none of them HEAVY."""
    n_random = min(budget - 1, round(budget * explore)) if budget > 1 else 0
    picks = _take(space, ranked, budget - n_random, seen, target, report)
    if not ranked or not n_random:
        return picks
    taken = {p.entry.candidate for p in picks}
    band = [r for r in ranked if r.seconds <= EXPLORE_BAND * ranked[0].seconds and r.candidate not in taken]
    for i in random.Random(seed).sample(range(len(band)), len(band)):
        if n_random <= 0:
            break
        p = _pick(space, band[i].candidate, "random", target, report)
        if p is not None and not _heavy(p, target) and _fresh(p, seen):
            picks.append(p)
            n_random -= 1
    return picks


def _kept(space: Space, keep: Sequence[tuple[str, str]], seen: set[str], target: Target,
          report: Report) -> list[_Pick]:
    """The kept points (TuneOptions.keep) as picks: each stored (sGraph identity, label) at the index its sGraph
    has in this search. A point this search lacks, or that does not instantiate at these shapes, is noted and
    passed over (another build may find other forms); one the model or the draw already took is tried once."""
    out = []
    for sgraph, label in keep:
        try:
            c = located(space.result.graphs, sgraph, label)
        except ValueError as e:
            raise InputError(f"tune: keep: {e}") from None
        if c is None:
            report.notes.append(f"kept point {label}: no sGraph of this search is {sgraph}")
            continue
        try:
            g = space.instantiate(c)
        except MappingError as e:
            report.notes.append(f"kept point {label} ({c} here) does not instantiate at these shapes: {e}")
            continue
        p = _Pick(Entry(c, "kept", risk=overflow_risk(g)), estimate(g, target, strides=space.strides), g)
        if _fresh(p, seen):
            out.append(p)
    return out


def _heavy(p: _Pick, target: Target, limit: float = HEAVY) -> bool:
    """Whether a kernel of `p` holds more than `limit` times the registers a thread may have at its warps (the
    model's estimate)."""
    return any(overfull(k.work, target, limit) for k in p.cost.kernels)


def _until_one_survives(trial: _Trial, space: Space, picks: list[_Pick], rest: list[Ranked], budget: int,
                        seen: set[str]) -> None:
    """If no fused pick survived, try more from the ranking (picks grows in place)."""
    rounds = 0
    while not any(p.entry.ok for p in picks if p.fused) and rest and rounds < EXTRA_ROUNDS:
        more = _take(space, rest, budget, seen, trial.target, trial.report)
        taken = {p.entry.candidate for p in more}
        rest = [r for r in rest if r.candidate not in taken]
        trial.report.notes.append(f"no compiled candidate survived; tried {len(more)} more from the ranking")
        trial.run(more)
        picks += more
        rounds += 1


def _refine(trial: _Trial, space: Space, picks: list[_Pick], refine: int, seen: set[str], target: Target,
            report: Report, clock: _Clock, log: Callable[[str], None]) -> None:
    """Phase 4: try the neighbours of the best candidate so far (`refine` of them, best estimate first), and of
    the best of each other form within REFINE_BAND of it (half as many), in one batch per round, for as long as
    some of them improve; a round goes on from those that did."""
    seeds = _seeds(trial, space, picks)
    for _ in range(REFINE_ROUNDS if refine else 0):
        if not seeds:
            return
        if clock.spent():
            report.notes.append(f"time budget of {clock.budget:g} s spent: refinement stopped")
            return
        batch: list[_Pick] = []
        for k, seed in enumerate(seeds):
            near = _near(space, seed.entry.candidate, target, report)
            batch += [p for p in near if _fresh(p, seen)][:refine if k == 0 else max(1, refine // 2)]
        if not batch:
            return
        log(f"refining around {', '.join(s.entry.label for s in seeds)}: {len(batch)} neighbour(s)")
        trial.run(batch)
        picks += batch
        tried = {id(p) for p in batch}
        seeds = [s for s in _seeds(trial, space, picks) if id(s) in tried]


def _near(space: Space, c: Candidate, target: Target, report: Report) -> list[_Pick]:
    """The points one step from `c` (`Space.neighbours`) as refinement picks, none TOO_HEAVY: safe first, then by
    estimate."""
    near = [p for p in (_pick(space, n, "refine", target, report) for n in space.neighbours(c))
            if p is not None and not _heavy(p, target, TOO_HEAVY)]
    return sorted(near, key=lambda p: (p.entry.risk is not None, p.cost.seconds, p.entry.candidate))


def _seeds(trial: _Trial, space: Space, picks: Sequence[_Pick]) -> list[_Pick]:
    """Where refinement goes on from: the best candidate so far (`_Trial.best`), then the best of each other form
    that is within REFINE_BAND of it (measured on a GPU, else estimated), best first."""
    best = trial.best(picks)
    if best is None:
        return []
    key = trial.key
    forms: dict[str, _Pick] = {}
    for p in sorted((p for p in picks if p.fused and p.entry.ok and key(p) is not None
                     and (p.entry.risk is None) == (best.entry.risk is None)), key=key):
        forms.setdefault(space.form(p.entry.candidate.graph, p.entry.candidate.grid), p)
    return [best] + [p for p in forms.values() if p is not best and key(p) <= REFINE_BAND * key(best)]


def _pick(space: Space, c: Candidate, origin: str, target: Target, report: Report) -> _Pick | None:
    """`c` instantiated and estimated, or None with a note: the space promised it instantiates, so a failure is
    a bug worth seeing."""
    try:
        g = space.instantiate(c)
    except MappingError as e:
        report.notes.append(f"{c} is in the space but did not instantiate: {e}")
        return None
    return _Pick(Entry(c, origin, risk=overflow_risk(g)), estimate(g, target, strides=space.strides), g)


def _fresh(p: _Pick, seen: set[str]) -> bool:
    """False if a candidate with the same concrete µGraph was already taken (sGraphs can coincide once
    their sizes are fixed, e.g. a loop of range 1)."""
    h = p.graph.structural_hash()
    if h in seen:
        return False
    seen.add(h)
    return True


def _take(space: Space, ranked: Sequence[Ranked], n: int, seen: set[str], target: Target,
          report: Report) -> list[_Pick]:
    """The first n distinct kernels of `ranked`, in three passes: the best point of each form (split-KV
    partials, a tail, one fused kernel, ...) that the model puts within EXPLORE_BAND of its best (a safe one,
    unless no point is safe), then one per
    launch shape (estimates often tie between a kernel and its twins over another grid dim or sGraph), then
    the rest in order.

    Forms first because the model is least to be trusted between forms, whose costs come from different terms:
    on an H100 (benchmarks/results/gpu_bench_h100_2026-11-26_s7a.json) attention at h=8192 took its 12 model
    picks from the one-kernel form (estimates 24-28 µs) and none from the split-KV partials (30 µs), and chose a
    15.2 µs kernel where a partials kernel had measured 10.8 µs with the tuner before."""
    out: list[_Pick] = []
    taken: set[Candidate] = set()
    forms: set[str] = set()
    shapes: set[tuple] = set()
    band = EXPLORE_BAND * ranked[0].seconds if ranked else 0.0
    passes: tuple[Callable[[Ranked], bool], ...] = (
        lambda r: ((r.risk is None) == (ranked[0].risk is None) and r.seconds <= band
                   and space.form(r.candidate.graph, r.candidate.grid) not in forms),
        lambda r: r.shape not in shapes,
        lambda r: True)
    for wanted in passes:
        for r in ranked:
            if len(out) >= n:
                return out
            if r.candidate in taken or not wanted(r):
                continue
            taken.add(r.candidate)
            p = _pick(space, r.candidate, "model", target, report)
            if p is not None and not _heavy(p, target, TOO_HEAVY) and _fresh(p, seen):
                out.append(p)
                shapes.add(r.shape)
                forms.add(space.form(r.candidate.graph, r.candidate.grid))
    return out


class _Trial:
    """Phase 3, batch by batch: compile ahead of time (the compiler's figures go into the estimate), then on
    a GPU run each survivor once against the reference and time it."""

    def __init__(self, space: Space, target: Target, gpu: bool, device: Any, compile: bool,
                 workers: int | None, report: Report, clock: _Clock, seed: int, log: Callable[[str], None],
                 progress: Progress | None, cluster: Any, started: ProcessPoolExecutor | None) -> None:
        self.program, self.strides = space.program, space.strides
        self.target, self.gpu, self.device, self.compile = target, gpu, device, compile
        self.workers, self.report, self.clock, self.seed = workers, report, clock, seed
        self.log, self.progress, self.cluster, self.started = log, progress, cluster, started
        self.bench: tuple[list, Any, list] | None = None   # inputs, reference output, rotated copies

    def run(self, batch: list[_Pick]) -> None:
        for p in batch:
            p.entry.estimate_us = p.cost.seconds * 1e6
        if self.compile:
            self._compile(batch)
        else:
            for p in batch:
                p.entry.status = Status.OK
        self.clock.lap("compile")
        if self.gpu:
            self._profile(batch)
        self.clock.lap("profile")

    def key(self, p: _Pick) -> float | None:
        """What candidates are compared by: the measured µs on a GPU, else the estimate."""
        return p.entry.measured_us if self.gpu else p.entry.estimate_us

    def best(self, picks: Sequence[_Pick]) -> _Pick | None:
        """The best fused candidate so far that could be chosen: measured on a GPU, else estimated."""
        key = self.key
        ok = [p for p in picks if p.fused and p.entry.ok and key(p) is not None]
        safe = [p for p in ok if p.entry.risk is None] or ok
        return min(safe, key=key, default=None)

    def _compile(self, batch: list[_Pick]) -> None:
        self.log(f"compiling {len(batch)} candidate(s) for sm_{self.target.arch}")

        def done(k: int) -> None:
            report_progress(self.progress, "compile", k, len(batch))

        done(0)
        graphs = [p.graph for p in batch]
        try:
            results = compile_many(graphs, self.workers, self.target.arch, done, self.cluster, self.started,
                                   self.seed if self.gpu else None, self.strides)
        except Exception as e:  # a broken worker pool (e.g. an unguarded __main__ under spawn) or a lost Ray task
            self.started = None   # pool.run killed it
            self.report.notes.append(f"parallel compilation failed ({type(e).__name__}: {e}); compiled in this "
                                     "process")
            results = compile_many(graphs, 1, self.target.arch, strides=self.strides)
        for p, r in zip(batch, results):
            _judge(p, r, self.target, self.strides)
            self.report.notes += [f"{p.entry.label}: {problem}" for problem in r.problems]

    def _profile(self, batch: list[_Pick]) -> None:
        from prism.interp import run
        from prism.tune.profile import input_copies, random_inputs

        if self.bench is None:
            inputs = random_inputs(self.program, self.seed, self.device, self.strides)
            want = run(self.program, [t.float().cpu() for t in inputs])[0]
            self.bench = (inputs, want, input_copies(inputs))
        report_progress(self.progress, "profile", 0, len(batch))
        for k, p in enumerate(batch, 1):
            if p.entry.ok:
                _time_one(p, *self.bench, self.report)
                if p.entry.measured_us is not None:
                    self.log(f"{p.entry.label}: {p.entry.measured_us:.2f} us")
            report_progress(self.progress, "profile", k, len(batch))


def _judge(p: _Pick, r: CompileResult, target: Target, strides: Sequence[Sequence[int]] | None) -> None:
    e = p.entry
    e.kernels = [k.to_json() for k in r.kernels]
    e.seconds["compile"] = r.seconds
    if not r.ok:
        e.drop(f"does not compile ({r.error})")
        return
    big = [k for k in r.kernels if k.shared > target.smem_per_block]
    if big:
        e.drop(f"{big[0].name} needs {big[0].shared} B shared memory > {target.smem_per_block}")
        return
    # A kernel that spills a little can still be the fastest: dropping such candidates once left a decoder
    # layer's norm + projection to the 8-kernel unfused program on an H100 (136 B stack frames).
    # The cost model charges spills a little (the target's spill_penalty), and on a GPU the measurement decides.
    p.cost = estimate(p.graph, target, aot=r.kernels, strides=strides)
    e.estimate_us = p.cost.seconds * 1e6
    e.status = Status.OK


def _time_one(p: _Pick, inputs: list, want: Any, copies: list, report: Report) -> None:
    """Time one candidate (prism.tune.profile.time_kernels): its device time, or why it was dropped; a
    verified candidate whose kernels disagree with the reference is a code generation bug, and noted so."""
    from prism.tune.profile import time_kernels

    t = time_kernels(p.graph, inputs, want, copies)
    p.entry.measured_us = t.us
    p.entry.seconds |= t.seconds
    if t.dropped is not None:
        p.entry.drop(t.dropped)
    if t.wrong is not None:
        report.notes.append(f"{p.entry.label}: verified equal but its kernels disagree with the "
                            f"reference (relative error {t.wrong:.2e}): a code generation bug")
    if t.note is not None:
        report.notes.append(f"{p.entry.label}: {t.note}")


def _correlation(picks: Sequence[_Pick], report: Report) -> None:
    from prism.tune.profile import spearman

    pairs = [(p.entry.estimate_us, p.entry.measured_us) for p in picks
             if p.entry.measured_us is not None and p.entry.estimate_us is not None]
    report.spearman = spearman([a for a, _ in pairs], [b for _, b in pairs])
    report.notes.append(f"Spearman rank correlation of cost-model estimates and measured medians over "
                        f"{len(pairs)} candidates: {'n/a' if report.spearman is None else f'{report.spearman:+.3f}'}")


def _choose(report: Report, target: Target) -> None:
    gpu = report.method == GPU_PROFILE
    key = (lambda e: e.measured_us) if gpu else (lambda e: e.estimate_us)
    ok = [i for i, e in enumerate(report.entries) if e.ok and key(e) is not None]
    if not ok:
        reasons = "; ".join(f"{e.label}: {e.fate}" for e in report.entries)
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
    e.status = Status.CHOSEN
    others = len(ok) - 1
    if gpu:
        report.reason = (f"fastest measured median ({e.measured_us:.2f} us) of {len(ok)} candidate(s) that "
                         f"compiled, ran and matched the reference")
    else:
        report.reason = (f"lowest cost-model estimate ({e.estimate_us:.2f} us on {target.name}) of "
                         f"{len(ok)} candidate(s)" + (" that compiled for sm_90"
                                                      if any(x.kernels for x in report.entries) else "")
                         + ("" if others else "; it was the only one"))
