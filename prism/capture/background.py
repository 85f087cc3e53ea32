"""Cones superoptimized on a background thread (`options={"background": True}`): a first compile not waited for.

With the option, the backend replaces each cone of fixed sizes at once by an op that runs the cone's lowered
program as torch ops (prism.interp.program_fn: the program every candidate is proved equal to, computed in
float32 like a compiled model's op on a CPU), and queues the program's superoptimization (search, tuning,
result cache) to one thread. Once it is done, the op runs the chosen kernels from its next call on, and the
cone's record in `history` ("pending") says what was chosen. Cones with the same program (every layer's
norm + projection) share one job. A superoptimization that fails leaves the program running, and the record
says why. `wait()` blocks until the queue is empty (benchmarks, tests; a serving loop need not call it).
Cones with symbolic sizes (prism.capture.dynamic) are not deferred: each is searched when compiled and tuned
at the first call of each size bucket, as without the option.

On a GPU the thread only searches (as superoptimize will: a program with several outputs output by output,
`prism.runtime.pipeline.cached_searches`): tuning times candidates on the device (in CUDA graphs, whose capture
forbids other threads' work on it), so the first call of the op after the search tunes there, in the model's
thread, and runs the chosen kernels from then on; `wait()` returns once the searches are done.

Why it is safe: both what runs before and what runs after compute the cone's program (the chosen µGraph is
verified equal to it), and each call reads the chosen graph once (one attribute, set once), so a call runs
one or the other, never a mix. CUDA graphs record whatever ran when they were captured, so the option is
refused together with `cudagraphs`. The thread is a daemon: a process that exits does not wait for the
searches still queued (the result cache writes whole entries, so none is left half written).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import warnings
from functools import cached_property
from typing import Any, Callable

import torch

from prism.ir import KernelGraph

__all__ = ["Pending", "submit", "wait"]

log = logging.getLogger("prism.compile")

_JOBS: dict[tuple[str, str], Pending] = {}
"""One job per (program, device), shared by every cone with that program."""
_QUEUE: queue.Queue[Pending] = queue.Queue()
_LOCK = threading.Lock()
_THREAD: list[threading.Thread] = []


class Pending:
    """A program's superoptimization, queued or done, and the op that runs the program until it is done.

    `records` are the history entries of the cones that use it (each updated by `describe(opt)` when it is
    done, or told why it failed); `opt` is the OptimizedGraph once chosen. `done` is set when the thread's
    part is over: everything on a CPU; on a GPU the search, after which the next call tunes (module docstring)."""

    def __init__(self, graph: KernelGraph, device: torch.device, options: dict[str, Any],
                 describe: Callable[[Any], dict[str, Any]]) -> None:
        from prism.runtime.torch_op import runner_op

        self.graph, self.device, self.options, self.describe = graph, device, options, describe
        self.records: list[dict[str, Any]] = []
        self.opt: Any = None
        self.failed: str | None = None
        self.done = threading.Event()
        self.op = runner_op(f"p{graph.structural_hash()[:16]}_{device.type}", graph, self)

    def run_op(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The chosen kernels once they are there, the program as torch ops until then."""
        opt = self.opt
        if opt is None and self.done.is_set() and self.failed is None:  # on a GPU, searched: tune here, now
            opt = self._settle()
        return self._program(tensors) if opt is None else opt.run_op(tensors)

    @cached_property
    def _program(self) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
        from prism.interp import program_fn

        return program_fn(self.graph)

    def said(self) -> dict[str, Any]:
        """What a cone's record says about this job now."""
        if self.opt is not None:
            return self.describe(self.opt)
        if self.failed is not None:
            return {"chosen": None, "why": f"background superoptimization failed ({self.failed}); the cone's "
                                           "program runs as torch ops"}
        return {"chosen": "pending: superoptimizing in the background, the program runs as torch ops meanwhile",
                "why": None}

    def attach(self, record: dict[str, Any]) -> None:
        """Keep `record` (a cone's history entry) up to date with this job."""
        with _LOCK:
            self.records.append(record)
            record.update(self.said())

    def _work(self) -> None:
        """The thread's part: the whole superoptimization on a CPU; on a GPU, the search alone (into the result
        cache), since tuning times candidates on the device, where it must not overlap the model's launches
        (a CUDA graph captured for timing forbids other threads' work on the device meanwhile)."""
        from prism.runtime.pipeline import cached_searches

        if self.device.type == "cuda":
            self._attempt(lambda: cached_searches(self.graph, self.options.get("search_options"),
                                                  self.options.get("cache", True)))
        else:
            self._settle()
        self.done.set()

    def _settle(self) -> Any:
        """Superoptimize now (the search from the result cache where it is there); the chosen graph, or None."""
        from prism.runtime import superoptimize

        self.opt = self._attempt(lambda: superoptimize(self.graph, device=self.device, **self.options))
        if self.opt is not None:
            log.info("prism: %s now runs %s", self.op,
                     self.opt.report.best.label if self.opt.report.best else "the program")
        with _LOCK:
            for record in self.records:
                record.update(self.said())
        return self.opt

    def _attempt(self, work: Callable[[], Any]) -> Any:
        """`work()`, or None with `failed` set (the program keeps running; the records say why)."""
        try:
            # "no GPU: reference executor" is in the record (catch_warnings is process-wide state: a compile in
            # the main thread meanwhile may let one through, which shows a warning and changes nothing else)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return work()
        except Exception as e:
            self.failed = f"{type(e).__name__}: {e}"
            log.warning("prism: background superoptimization of %s failed: %s", self.op, self.failed)
            with _LOCK:
                for record in self.records:
                    record.update(self.said())
            return None


def submit(graph: KernelGraph, device: torch.device, options: dict[str, Any],
           describe: Callable[[Any], dict[str, Any]]) -> Pending:
    """The job for `graph` on `device`, queued now unless one with the same program (and input strides, the
    layout it is tuned for) exists."""
    key = (graph.structural_hash(), str(device), options.get("strides"))
    with _LOCK:
        if key not in _JOBS:
            _JOBS[key] = Pending(graph, device, options, describe)
            _QUEUE.put(_JOBS[key])
            if not _THREAD:
                _THREAD.append(threading.Thread(target=_work, name="prism-background", daemon=True))
                _THREAD[0].start()
        return _JOBS[key]


def _work() -> None:
    while True:
        _QUEUE.get()._work()


def wait(timeout: float | None = None) -> bool:
    """Block until every queued superoptimization is done (True), or `timeout` seconds pass (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _LOCK:
        jobs = list(_JOBS.values())
    return all(job.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for job in jobs)
