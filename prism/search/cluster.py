"""The Ray backend: the search's tasks as Ray tasks, on a cluster or on a Ray instance started here.

`prism.search(graph, backend="ray", ray_address=...)` runs generation subtrees, prefilter chunks and
verification batches as Ray tasks: the same functions and picklable arguments as the local worker
processes (prism.search.parallel), so the results are the same. Each Ray worker process keeps its own
e-graph and the program's prefilter runs and verdicts between tasks, as a local worker does, and runs
torch on one thread (Ray sets OMP_NUM_THREADS to a task's one CPU): the tasks are the parallelism. Every
node needs Prism installed (the version the driver runs) and a clock in step with the driver's (the
search's deadline is wall-clock time). Ray is optional (`pip install 'prism-superopt[ray]'`) and is
imported here only, when a Ray search starts.

Failures: a task whose worker process dies (killed, out of memory, a lost node) is run again by Ray, up
to MAX_RETRIES times; after that the search raises ClusterError: it never returns fewer graphs than a
local search would. An exception raised by a task itself is Prism's own and goes on as it is. Ctrl-C
(any exception in the caller, or a caller that stops reading results) cancels every unfinished task: a
queued one never starts, a running one gets KeyboardInterrupt at its next Python step (an e-graph run
returns to Python every few iterations); tasks that go on are cancelled again, and once the caller has its
Ctrl-C, on a thread (RayWorkers._cancel). Not `force=True`, which kills the worker at once: in Ray 2.60 a
forced cancel that meets the task finishing aborts the driver ("Check failed: Tried to complete task that was
not pending", in about one Ctrl-C in three during the prefilter's short tasks)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from prism import pool
from prism.errors import InputError, PrismError

__all__ = ["BACKENDS", "MAX_RETRIES", "ClusterError", "RayWorkers", "check_backend", "ray_module"]

BACKENDS = ("local", "ray")
"""Where the search's and the tuner's tasks run: worker processes here, or Ray tasks."""
MAX_RETRIES = 3
"""How often Ray runs a task again after its worker process died."""
CANCEL_SECONDS = 10.0
"""How long a cancel goes on cancelling, in the caller, the tasks that have not stopped yet (RayWorkers._cancel)."""
LINGER_SECONDS = 300.0
"""How long it then goes on, on a daemon thread, for the tasks still running (RayWorkers._cancel)."""
_WAIT = 0.2
"""Seconds the driver waits on Ray at a time, so that Ctrl-C is seen promptly."""


class ClusterError(PrismError):
    """A Ray task was lost: its worker process died more often than Ray runs it again."""


def ray_module() -> Any:
    """The `ray` module, or InputError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("search: backend='ray' needs Ray, an optional dependency: "
                         "pip install 'prism-superopt[ray]'") from None
    return ray


def check_backend(who: str, backend: Any, ray_address: Any) -> None:
    """InputError for a backend that is not one of BACKENDS, or an address without backend='ray'."""
    if backend not in BACKENDS:
        raise InputError(f"{who}: backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if ray_address is not None and (backend != "ray" or not isinstance(ray_address, str)):
        raise InputError(f"{who}: ray_address is a Ray cluster's address for backend='ray', got {ray_address!r} "
                         f"with backend={backend!r}")


class RayWorkers:
    """Runs tasks as Ray tasks (one CPU each): on the Ray this process already joined, else on the
    cluster at `address` (as ray.init(address=...) takes it: "auto" finds one started by `ray start`),
    else on a new local Ray instance with `n` CPUs (default: all cores), kept for later searches. `n`
    is then the cluster's CPU count."""

    def __init__(self, n: int | None = None, address: str | None = None) -> None:
        from prism.ir.kinds import runtime_names

        if runtime_names():   # Ray's workers build the op table by importing Prism, as local ones do (prism.pool)
            raise InputError(f"backend='ray': op(s) {', '.join(runtime_names())} were registered at run time, and "
                             "Ray's worker processes would not have them; use the local backend")
        self.ray = ray_module()
        if not self.ray.is_initialized():
            where = {"address": address} if address else {"address": "local", "num_cpus": n}
            self.ray.init(**where, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        self.n = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.remote: dict[Callable[..., Any], Any] = {}

    def imap(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """(i, fn(*tasks[i])) for every task, as each finishes on the cluster."""
        ray = self.ray
        if fn not in self.remote:
            self.remote[fn] = ray.remote(fn)
        remote = self.remote[fn].options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)
        refs = [remote.remote(*t) for t in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=_WAIT)
                if ready and pending:  # and every other finished one, so each round is one pass over `pending`
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    ready += more
                for ref in ready:
                    yield index[ref], self._result(fn, index[ref], ref)
        except BaseException:  # Ctrl-C, a lost task, or a caller that stopped reading: stop the rest
            self._cancel(pending)
            raise

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """fn(*task) for every task, results in task order; `done(i, result)` as each task i finishes."""
        return pool.collect(self.imap(fn, tasks), len(tasks), done)

    def _cancel(self, refs: list[Any]) -> None:
        """Cancel the tasks of `refs`, and again every _WAIT seconds for those still running, for up to
        CANCEL_SECONDS here, then for up to LINGER_SECONDS on a daemon thread, so that Ctrl-C returns promptly. In
        Ray 2.60 a cancel that reaches a task as its worker starts it can be lost (about one Ctrl-C in eight on a
        loaded machine), and the task then runs to its end; and a cancel that reaches a worker before the task
        does is dropped, so a task whose worker is slow to start it (a new worker process importing torch on a
        loaded machine) needs a cancel sent after it started. Not `force=True`: see the module docstring."""
        refs = self._cancelling(refs, CANCEL_SECONDS)
        if refs:
            threading.Thread(target=self._cancelling, args=(refs, LINGER_SECONDS), daemon=True,
                             name="prism-ray-cancel").start()

    def _cancelling(self, refs: list[Any], seconds: float) -> list[Any]:
        """Cancel `refs` every _WAIT seconds while some run, for up to `seconds`, or until this process leaves
        Ray (whose tasks then end with it); returns those still running."""
        deadline = time.monotonic() + seconds
        try:
            while refs and time.monotonic() < deadline and self.ray.is_initialized():
                for ref in refs:
                    self.ray.cancel(ref)
                refs = self.ray.wait(refs, num_returns=len(refs), timeout=_WAIT)[1]
        except self.ray.exceptions.RaySystemError:   # it left Ray between the check and a call
            return []
        return refs

    def _result(self, fn: Callable[..., Any], i: int, ref: Any) -> Any:
        errors = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except errors.RayTaskError:  # the task raised: Prism's own exception, as a local run raises it
            raise
        except errors.RayError as e:
            raise ClusterError(f"search: Ray task {fn.__name__} #{i} was lost (its worker died {MAX_RETRIES + 1} "
                               f"times): {type(e).__name__}: {str(e).strip().splitlines()[0]}") from e
