"""A compiled graph's regions superoptimized concurrently, ahead of their replacement one by one.

The backend replaces cones one after another (a cone it cannot take whole is cut and tried again, a
region of several cones falls back to its cones), and each replacement superoptimizes its program. Done
one after another, the steps of one region that run in this process (generating the first states,
instantiating the tuning space, sorting) leave the worker processes idle, and the workers' long tasks
leave this process idle. So before the first replacement every cone is lowered and its program's
superoptimization started on a thread; the replacement of a cone then takes the result started for its
program, or superoptimizes itself where none was (the cones of a region that failed whole; a cone cut before
its matmul is cut here too, as its replacement will cut it). A 2-core machine then stays busy: with the
changes that came with it (fewer garbage collections, prism.pool.GC_THRESHOLD; no compile of a rest that only
views and copies; cheaper ranking), the example decoder layer's cold first compile went from 27.5 to 15.8-17.5 s
(`benchmarks/first_compile.py --model decoder_layer --runs 3`).

Why the result is the same: a program is known by what the result cache keys it by (structure, input
shapes and dtypes: its structural hash), so the result taken is the one that replacement would have computed, as a
cache hit would give it; searches and tunings are deterministic, whatever runs beside them. The threads
compute (`prism.runtime.pipeline.chosen`); the compiling thread wraps each result in its OptimizedGraph,
which registers a torch op and warns without a GPU, under the warnings filter the backend sets there.

On a GPU only the searches start ahead (into the result cache, so only with one): tuning times candidates
on the device, one tuning at a time, so it stays in the compiling thread, which then finds the searches
cached (`prism.runtime.pipeline.cached_searches`: a program with several outputs output by output, and its
groups' joint forms, as superoptimize searches it).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from prism.capture.lower import input_strides, lower
from prism.capture.partition import Cone
from prism.errors import UnsupportedOp
from prism.ir import KernelGraph

__all__ = ["Ahead", "THREADS"]

log = logging.getLogger("prism.compile")

THREADS = 8
"""Programs superoptimized at once, at most: each thread mostly waits on the shared worker processes."""


class Ahead:
    """The superoptimizations started for a graph's cones (`start`), and their results (`optimized`). A
    context manager: leaving it waits for every thread, so none outlives the compile."""

    def __init__(self, device: torch.device, options: dict[str, Any]) -> None:
        self.device, self.options = device, options
        self.futures: dict[str, Future] = {}
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="prism-ahead")

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def start(self, cone: Cone) -> None:
        """Start superoptimizing `cone`'s program as its replacement (`prism.capture.backend._take`) will take
        it: lowered whole; where an op cannot be lowered, without the operand torch computes for it (`Cone.detach`:
        a norm's `1 + weight`), else without that op and what the cone computes before it (`Cone.cut`: RoPE's
        products before attention), and that part as a cone of its own (`Cone.before`); a region that does not
        lower, cone by cone. Nothing where none of that lowers: the replacement lowers it again and says why."""
        try:
            graph, sources, _ = lower(cone.live(), cone.inputs(), cone.roots)
        except Exception as e:
            if cone.parts:
                for part in cone.parts:
                    self.start(part)
            elif isinstance(e, UnsupportedOp):
                apart = cone.detach(e.node)
                cut, rest = apart if apart is not None else cone.cut(e.node)
                if cut and cone.root not in cut:
                    before = None if apart is not None else cone.before(e.node)
                    for part in (before, rest):
                        if part is not None and (part.matmuls or part.reduces):
                            self.start(part)
            return
        self.submit(graph, input_strides(sources))

    def submit(self, graph: KernelGraph, strides: tuple[tuple[int, ...], ...] | None = None) -> None:
        """Start what goes ahead for `graph` (module docstring), whose inputs come with `strides`, unless it started
        for the same program and strides."""
        gpu = self.device.type == "cuda"
        if gpu and not self.options.get("cache"):
            return
        key = (graph.structural_hash(), strides)      # shapes and dtypes included
        if key not in self.futures:
            self.futures[key] = (self.pool.submit(self._searched, graph) if gpu
                                 else self.pool.submit(self._chosen, graph, strides))

    def optimized(self, graph: KernelGraph, strides: tuple[tuple[int, ...], ...] | None = None) -> Any:
        """superoptimize(graph, device, **options) for inputs passed with `strides`: from the result started for
        its program if there is one (raising what that raised)."""
        from prism.runtime import OptimizedGraph, superoptimize

        started = self.futures.get((graph.structural_hash(), strides))
        if started is not None and self.device.type != "cuda":
            chosen, report, result = started.result()
            return OptimizedGraph(graph, chosen, report, self.device, result, pdl=self.options.get("pdl", False))
        if started is not None:
            started.result()   # its search is in the result cache, or superoptimize says why not
        return superoptimize(graph, device=self.device, strides=strides, **self.options)

    def _chosen(self, graph: KernelGraph, strides: tuple[tuple[int, ...], ...] | None) -> Any:
        from prism.runtime.pipeline import chosen

        return chosen(graph, device=self.device, strides=strides, **self.options)

    def _searched(self, graph: KernelGraph) -> None:
        from prism.runtime.pipeline import cached_searches

        try:
            cached_searches(graph, self.options.get("search_options"), self.options["cache"])
        except Exception as e:  # the replacement searches again, and says what fails
            log.info("prism: searching %s ahead failed (%s: %s)", graph.structural_hash()[:16], type(e).__name__, e)

