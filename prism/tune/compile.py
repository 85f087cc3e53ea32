"""Compile candidates ahead of time, in parallel: the costly step of tuning (about a second per kernel).

Each candidate travels to a worker as kernel-graph JSON; the worker generates its Triton module,
compiles every kernel for the target (sm_90 by default) and sends back what the tuner needs: per
kernel its shared memory, registers, stack frame (spills) and warps, or the compiler's error. Workers
come from `prism.pool` (spawned: a forked child of a process holding Triton or egglog state can
deadlock) with Triton's interpreter switched off, since interpreted kernels cannot be compiled.

On a GPU (`warm`), a worker instead runs the candidate once on the tuner's inputs, so that Triton's JIT
compiles it there, in parallel, into its on-disk cache, and reads the figures from the binaries that launch
built (`CompiledGraph.launched`): the ahead-of-time compile does not specialize on arguments as a launch does
(alignment, strides of 1), so without the run the timing process compiled every timed candidate a second time,
one after another (about a second each: most of a region's tuning), and with both a worker compiled each
candidate twice. Where that run fails (a launch error), the worker compiles ahead of time as without a GPU, so a
candidate that does not compile is still dropped with the compiler's reason.
A worker compiles into the cache the calling process reads at the time of the call (`cache_dir`), not the
one it read when it started: torch.compile sets TRITON_CACHE_DIR in its process (Inductor's first Triton
kernel), so workers kept from before that warmed a cache the timing process no longer read (the H100 run of
benchmarks/results/gpu_bench_h100_2026-11-26_s7a.json loaded each timed candidate in 0.6-2.3 s, about a third of
the tuning, on every config after the first).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from prism import pool
from prism.codegen.aot import AotKernel
from prism.codegen.spec import contiguous
from prism.ir import KernelGraph

__all__ = ["CompileResult", "cache_dir", "compile_one", "compile_many", "compile_task", "default_workers",
           "kept_workers", "release", "start_workers"]


@dataclass(frozen=True)
class CompileResult:
    """All kernels of one candidate compiled (`ok`), or the first error; wall seconds spent; what went wrong on the
    way without dropping it (`problems`: the tuner's report notes them)."""

    kernels: tuple[AotKernel, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def spills(self) -> bool:
        return any(k.spills for k in self.kernels)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _target(arch: int) -> Any:
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", arch, 32)


def cache_dir() -> str:
    """The folder Triton's cache is in for this process now (TRITON_CACHE_DIR, else Triton's default)."""
    from triton import knobs

    return knobs.cache.dir


def compile_one(doc: dict[str, Any], arch: int = 90, warm: int | None = None,
                cache: str | None = None, strides: Sequence[Sequence[int]] | None = None) -> CompileResult:
    """Compile the kernel graph `doc` (its JSON) for sm_`arch`; never raises for a compiler error. `warm`: a
    seed; the kernels run once on CUDA instead, on `random_inputs(graph, warm)` (the tuner's inputs), which leaves
    their launch-specialized binaries in Triton's cache for the process that times them, and the figures are
    theirs (ahead of time only if that run fails). `cache`: the folder of Triton's cache to compile into (the
    caller's `cache_dir`), where it is not this process's already. `strides`: those the graph's inputs are passed
    with (None: contiguous), which a launch specializes on and an ahead-of-time compile then mirrors."""
    from prism.codegen import compile_graph

    if cache is not None and cache != cache_dir():
        os.environ["TRITON_CACHE_DIR"] = cache
    start = time.time()
    try:
        graph = KernelGraph.from_json(doc)
        compiled = compile_graph(graph)
        kernels, problems = _launched(graph, compiled, warm, strides) if warm is not None else (None, ())
        kernels = kernels or compiled.aot(_target(arch), strides or [contiguous(t.shape) for t in graph.inputs])
    except Exception as e:  # a candidate that does not compile is dropped, with the reason
        return CompileResult(error=_first_line(e), seconds=time.time() - start)
    return CompileResult(tuple(replace(k, ptx=None) for k in kernels), None, time.time() - start, problems)


def _launched(graph: KernelGraph, compiled: Any, seed: int,
              strides: Sequence[Sequence[int]] | None) -> tuple[list[AotKernel] | None, tuple[str, ...]]:
    """Run `compiled` once on CUDA on the inputs the tuner times it with (same shapes, hence the same strides and
    specialization), so Triton's JIT stores the binaries the timing process will ask for: their figures, or None
    and why the run failed. The caller then compiles ahead of time, which names a compile error; the timing
    process runs the candidate itself, meets any other error and drops the candidate with its reason."""
    import torch

    from prism.tune.profile import random_inputs

    try:
        kernels = compiled.launched(random_inputs(graph, seed, "cuda", strides))
        torch.cuda.synchronize()
    except Exception as e:  # said in the result's problems (the tuner's notes), as above
        return None, (f"its launch in the compile worker failed ({_first_line(e)}); compiled ahead of time",)
    return kernels, ()


def _first_line(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{type(e).__name__}: {first[:300]}"


def _worker_init() -> None:
    os.environ["TRITON_INTERPRET"] = "0"


def compile_task(doc: dict[str, Any], arch: int = 90, warm: int | None = None,
                 strides: Sequence[Sequence[int]] | None = None) -> CompileResult:
    """compile_one in a worker that did not start with _worker_init (a Ray task): the interpreter off; Triton's
    cache that of the machine it runs on."""
    _worker_init()
    return compile_one(doc, arch, warm, None, strides)


def _interpreting() -> bool:
    import sys

    if "triton" not in sys.modules:
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    from prism.codegen import interpreting

    return interpreting()


def compile_many(graphs: Sequence[KernelGraph], workers: int | None = None, arch: int = 90,
                 done: Callable[[int], None] | None = None, cluster: Any = None,
                 workers_pool: ProcessPoolExecutor | None = None, warm: int | None = None,
                 strides: Sequence[Sequence[int]] | None = None) -> list[CompileResult]:
    """Compile every graph; results in order, `done(k)` after k have finished; `warm`, `strides`: compile_one's
    (the graphs are one program's candidates). With `cluster` (a
    prism.search.cluster.RayWorkers) as Ray tasks; else on `workers_pool` (from `start_workers`, left running
    for the caller's next batch); else in this process when one worker suffices and this process compiles
    (not interpreting), or when no worker process can be started; else in a pool of `workers` processes
    (default: cores) started for this call."""
    done = done or (lambda k: None)
    if cluster is not None:
        finished = itertools.count(1)
        return cluster.map(compile_task, [(g.to_json(), arch, warm, strides) for g in graphs],
                           lambda i, r: done(next(finished)))
    tasks = [(g.to_json(), arch, warm, cache_dir(), strides) for g in graphs]
    finished = itertools.count(1)
    if workers_pool is not None:
        return pool.run(workers_pool, compile_one, tasks, lambda _: done(next(finished)))
    started = start_workers(min(default_workers() if workers is None else max(1, workers), len(tasks)),
                            bool(tasks))
    if started is None:
        out = []
        for k, t in enumerate(tasks, 1):
            out.append(compile_one(*t))
            done(k)
        return out
    try:
        return pool.run(started, compile_one, tasks, lambda _: done(next(finished)))
    finally:
        release(started)


_LOCAL = threading.local()


def _scopes() -> list[dict[int, ProcessPoolExecutor]]:
    """This thread's open `kept_workers` scopes, innermost last: the compile pools started in each, by worker
    count. Per thread: a background tuning (prism.capture.background) never takes a pool that another thread's
    scope shuts down."""
    if not hasattr(_LOCAL, "scopes"):
        _LOCAL.scopes = []
    return _LOCAL.scopes


@contextmanager
def kept_workers() -> Iterator[None]:
    """Compile workers started inside this scope serve its later tunings too, and are shut down at its end: a
    loop of tunings (gpu_bench's configs, the regions of a compiled model) starts them once. A start costs
    seconds (each worker imports torch and Triton: 3.1-3.6 s per config on an H100's host, the reports' `workers`
    seconds in benchmarks/results/gpu_bench_h100_2026-11-26.json). A scope, not the process: on a GPU a worker
    that ran a candidate holds a CUDA context, and memory with it."""
    pools: dict[int, ProcessPoolExecutor] = {}
    _scopes().append(pools)
    try:
        yield
    finally:
        _scopes().remove(pools)
        for started in pools.values():
            started.shutdown()


def start_workers(workers: int, needed: bool = True) -> ProcessPoolExecutor | None:
    """A pool of `workers` compile processes (Triton's interpreter off), or None where this process does the
    work: one worker suffices and this process compiles (not interpreting), or none can be started. Inside
    `kept_workers`, the scope's smallest running pool of at least that many workers if it has one (a batch
    smaller than the cores asks for fewer, and would otherwise start a pool of its own). Hand it back with
    `release`."""
    if not (workers > 1 or (needed and _interpreting())):
        return None
    if not _scopes():
        return pool.start(workers, _worker_init)
    pools = _scopes()[-1]
    kept = [p for n, p in sorted(pools.items()) if n >= workers and pool.alive(p)]
    if kept:
        return kept[0]
    started = pool.start(workers, _worker_init)
    if started is not None:
        pools[workers] = started
    return started


def release(started: ProcessPoolExecutor | None) -> None:
    """Shut down a pool from `start_workers`, unless a `kept_workers` scope keeps it for later tunings."""
    if started is not None and not any(started in pools.values() for pools in _scopes()):
        started.shutdown()
