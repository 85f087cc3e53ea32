"""Ranking a parameter space with the cost model, in parallel: the tuner's first phase.

A space can hold millions of points (QK-Attention: ~2 million at h=16384), so a point is never built on
its own. A tiling (sGraph, grid, loop) is instantiated once and its kernels derived once
(`prism.tune.cost.kernels_of`); each of its launches (warps, stages) only re-costs them
(`prism.tune.cost.relaunched`), which gives exactly what estimating the instantiated point gives.

Tilings go to worker processes in chunks of consecutive tilings, each with the JSON of the few sGraphs
it needs (not the whole search result: QK-Attention's is 1.5 MB). Results come back per tiling and are
sorted in this process, so the ranking is the same whatever the number of workers: safe points first
(`prism.tune.safety`), then by estimate, then by shared memory, then by candidate.

A space of more than RANK_SAMPLE tilings is not ranked whole (QK-Attention has 203,400 tilings at its first config:
over 4 minutes of ranking on one core, benchmarks/results/rank_climb.md): `climb` ranks a sample and then the neighbourhoods of the best tilings so far, until
they are the best of their neighbourhoods.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from prism.codegen.one_op import to_custom
from prism.errors import MappingError
from prism.search.result import SymbolicGraph
from prism.tune.cost import cost_of, kernels_of, relaunched
from prism.tune.safety import overflow_risk
from prism.tune.space import Candidate, Space, instantiate
from prism.tune.target import Target

__all__ = ["Ranked", "rank", "rank_chunk", "climb", "CHUNKS_PER_WORKER", "CLIMB_WIDTH"]

CHUNKS_PER_WORKER = 4
"""Chunks per worker: enough that a worker given slow tilings does not hold the others up."""
CLIMB_WIDTH = 16
"""`climb` starts from this many of the best tilings ranked so far (besides each form's best)."""

Tiling = tuple[int, tuple[int, ...], int]
"""(sGraph index, grid, loop)."""

Mapper = Callable[[Callable[..., Any], Sequence[tuple]], list[Any]]
"""map(fn, tasks) -> [fn(*task) for task in tasks], in order: a worker pool, Ray, or this process."""


@dataclass(frozen=True)
class Ranked:
    """One point as the model sees it: its estimate, the shared memory of its kernels, why it can overflow
    (None: it cannot), and `shape`, its launches' block counts (grid dims of size 1 dropped, so the same
    kernel over x or over y looks alike) and loop ranges."""

    candidate: Candidate
    seconds: float
    smem: int
    risk: str | None
    shape: tuple

    @property
    def order(self) -> tuple:
        return self.risk is not None, self.seconds, self.smem, self.candidate


def climb(space: Space, tilings: Sequence[Tiling], sample: int, limit: int, seed: int, target: Target,
          workers: int = 1, mapper: Mapper | None = None) -> tuple[list[Ranked], list[str], int]:
    """`rank` over a space too large to rank whole (more than `sample` tilings), and the tilings it ranked:
    a stratified sample first (every sGraph's share of `sample`, at least one tiling each, so that no form
    goes unseen), then rounds of hill climbing. Each round ranks the tilings adjacent (`GraphSpace.adjacent`:
    one parallel size a step either way) to the best `CLIMB_WIDTH` tilings so far and to each form's best, and
    stops when all of those have been climbed from (each is then the best of its neighbourhood) or `limit`
    tilings are ranked. A tiling's estimate changes smoothly with its sizes (blocks per wave, tile size), so
    the best tiling of a sample's good region is a few steps from the sample; a uniform sample of the same size
    has missed whole forms (RANK_LIMIT). `seed` fixes the sample."""
    if len(tilings) <= sample:
        rows, notes = rank(space, tilings, target, workers, mapper)
        return rows, notes, len(tilings)
    by_graph: dict[int, list[Tiling]] = {}
    for t in tilings:
        by_graph.setdefault(t[0], []).append(t)
    rng = random.Random(seed)
    first = [t for ts in by_graph.values()
             for t in rng.sample(ts, min(len(ts), max(1, round(len(ts) * sample / len(tilings)))))]
    docs: dict[int, dict] = {}   # each sGraph's JSON, made once for every round
    rows, notes = rank(space, first, target, workers, mapper, docs)
    done, climbed = set(first), set()
    while len(done) < limit:
        starts = [t for t in _starts(space, rows) if t not in climbed]
        if not starts:
            break
        climbed.update(starts)
        step = [t for t in dict.fromkeys((g, *a) for g, grid, loop in starts
                                        for a in space.graphs[g].adjacent(grid, loop)) if t not in done]
        step = step[:limit - len(done)]
        if step:
            done.update(step)
            more, said = rank(space, step, target, workers, mapper, docs)
            rows, notes = sorted(rows + more, key=lambda r: r.order), notes + said
    return rows, notes, len(done)


def _starts(space: Space, rows: Sequence[Ranked]) -> list[Tiling]:
    """Where a round of `climb` starts: the best CLIMB_WIDTH distinct tilings of `rows` (ranked, best first), the
    best tiling of each of the CLIMB_WIDTH best sGraphs (near-ties of one sGraph can fill the first), and each
    form's best."""
    best: list[Tiling] = []
    graphs: dict[int, Tiling] = {}
    forms: dict[str, Tiling] = {}
    for r in rows:
        c = r.candidate
        t = (c.graph, c.grid, c.loop)
        if len(best) < CLIMB_WIDTH and t not in best:
            best.append(t)
        if len(graphs) < CLIMB_WIDTH:
            graphs.setdefault(c.graph, t)
        forms.setdefault(space.form(c.graph, c.grid), t)
    return list(dict.fromkeys(best + list(graphs.values()) + list(forms.values())))


def rank(space: Space, tilings: Sequence[Tiling], target: Target, workers: int = 1, mapper: Mapper | None = None,
         docs: dict[int, dict] | None = None) -> tuple[list[Ranked], list[str]]:
    """Every launch of every (graph, grid, loop) in `tilings`, ranked; and a note per tiling that did not
    instantiate (the space promised it would, so that is a bug worth seeing). `mapper` runs the chunks
    (None: in this process). `docs`: the sGraphs' JSON made so far, filled in (a caller ranking in rounds)."""
    step = max(1, -(-len(tilings) // (CHUNKS_PER_WORKER * max(1, workers))))
    chunks = [tilings[i:i + step] for i in range(0, len(tilings), step)]
    inputs = (space.shapes, space.dtype, space.names)
    docs = {} if docs is None else docs
    for g in {g for g, _, _ in tilings} - docs.keys():
        docs[g] = space.result.graphs[g].to_json()
    tasks = [({g: docs[g] for g, _, _ in chunk}, inputs, target,
              [(g, grid, loop, space.graphs[g].launches(grid, loop)) for g, grid, loop in chunk], space.strides)
             for chunk in chunks]
    done = (mapper or _serial)(rank_chunk, tasks)
    rows: list[Ranked] = []
    notes: list[str] = []
    for chunk in done:
        for item in chunk:
            if isinstance(item, str):
                notes.append(item)
            else:
                rows += item
    rows.sort(key=lambda r: r.order)
    return rows, notes


def rank_chunk(graphs: dict[int, dict], inputs: tuple, target: Target,
               tilings: Sequence[tuple[int, tuple[int, ...], int, Sequence[tuple[int, int, bool]]]],
               strides: Sequence[Sequence[int]] | None = None) -> list[Any]:
    """Per tiling (graph, grid, loop, launches): a list of Ranked, one per launch, or the reason it did not
    instantiate. `inputs`: the program's (shapes, dtype, names); `strides`: those its inputs are passed with.
    Runs in a worker: everything comes as JSON or plain values."""
    sgraphs = {g: SymbolicGraph.from_json(doc) for g, doc in graphs.items()}
    out: list[Any] = []
    for g, grid, loop, launches in tilings:
        base = Candidate(g, tuple(grid), loop)
        try:
            kg = instantiate(sgraphs[g], *inputs, base)
        except MappingError as e:
            out.append(f"{base} is in the space but did not instantiate: {e}")
            continue
        lowered = to_custom(kg)
        works, risk = {False: kernels_of(kg, target, strides, lowered)}, overflow_risk(kg)
        shape = tuple((tuple(sorted(x for x in w.grid if x > 1)), w.loop) for w in works[False])
        rows = []
        for w, s, gemv in launches:
            if gemv not in works:   # a GEMV's kernels do other work (no dot): the same µGraph, launched so
                for _, node in kg.topo():
                    if node.op == "custom":
                        node.attrs["block"].launch = replace(node.attrs["block"].launch, gemv=gemv)
                works[gemv] = kernels_of(kg, target, strides, lowered)
            cost = cost_of(relaunched(works[gemv], w, s, target), target)
            rows.append(Ranked(Candidate(g, tuple(grid), loop, w, s, gemv), cost.seconds,
                               sum(k.work.smem for k in cost.kernels), risk, shape))
        out.append(rows)
    return out


def _serial(fn: Callable[..., Any], tasks: Sequence[tuple]) -> list[Any]:
    return [fn(*t) for t in tasks]
