"""Ranking a parameter space with the cost model, in parallel: the tuner's first phase.

A space can hold millions of points (QK-Attention: ~2 million at h=16384), so a point is never built on
its own. A tiling (sGraph, grid, loop) is instantiated once and its kernels derived once
(`prism.tune.cost.kernels_of`); each of its launches (warps, stages) only re-costs them
(`prism.tune.cost.relaunched`), which gives exactly what estimating the instantiated point gives.

Tilings go to worker processes in chunks of consecutive tilings, each with the JSON of the few sGraphs
it needs (not the whole search result: QK-Attention's is 1.5 MB). Results come back per tiling and are
sorted in this process, so the ranking is the same whatever the number of workers: safe points first
(`prism.tune.safety`), then by estimate, then by shared memory, then by candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prism.errors import MappingError
from prism.search.result import SymbolicGraph
from prism.tune.cost import cost_of, kernels_of, relaunched
from prism.tune.safety import overflow_risk
from prism.tune.space import Candidate, Space, instantiate
from prism.tune.target import Target

__all__ = ["Ranked", "rank", "rank_chunk", "CHUNKS_PER_WORKER"]

CHUNKS_PER_WORKER = 4
"""Chunks per worker: enough that a worker given slow tilings does not hold the others up."""

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


def rank(space: Space, tilings: Sequence[tuple[int, tuple[int, ...], int]], target: Target,
         workers: int = 1, mapper: Mapper | None = None) -> tuple[list[Ranked], list[str]]:
    """Every launch of every (graph, grid, loop) in `tilings`, ranked; and a note per tiling that did not
    instantiate (the space promised it would, so that is a bug worth seeing). `mapper` runs the chunks
    (None: in this process)."""
    step = max(1, -(-len(tilings) // (CHUNKS_PER_WORKER * max(1, workers))))
    chunks = [tilings[i:i + step] for i in range(0, len(tilings), step)]
    inputs = (space.shapes, space.dtype, space.names)
    tasks = [({g: space.result.graphs[g].to_json() for g, _, _ in chunk}, inputs, target,
              [(g, grid, loop, space.graphs[g].launches(grid, loop)) for g, grid, loop in chunk])
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
               tilings: Sequence[tuple[int, tuple[int, ...], int, Sequence[tuple[int, int]]]]) -> list[Any]:
    """Per tiling (graph, grid, loop, launches): a list of Ranked, one per launch, or the reason it did not
    instantiate. `inputs`: the program's (shapes, dtype, names). Runs in a worker:
    everything comes as JSON or plain values."""
    sgraphs = {g: SymbolicGraph.from_json(doc) for g, doc in graphs.items()}
    out: list[Any] = []
    for g, grid, loop, launches in tilings:
        base = Candidate(g, tuple(grid), loop)
        try:
            kg = instantiate(sgraphs[g], *inputs, base)
        except MappingError as e:
            out.append(f"{base} is in the space but did not instantiate: {e}")
            continue
        works, risk = kernels_of(kg, target), overflow_risk(kg)
        shape = tuple((tuple(sorted(x for x in w.grid if x > 1)), w.loop) for w in works)
        rows = []
        for w, s in launches:
            cost = cost_of(relaunched(works, w, s, target), target)
            rows.append(Ranked(Candidate(g, tuple(grid), loop, w, s), cost.seconds,
                               sum(k.work.smem for k in cost.kernels), risk, shape))
        out.append(rows)
    return out


def _serial(fn: Callable[..., Any], tasks: Sequence[tuple]) -> list[Any]:
    return [fn(*t) for t in tasks]
