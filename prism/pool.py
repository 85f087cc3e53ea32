"""Worker processes for the search and the tuner: no main guard needed, and Ctrl-C stops them at once.

Workers are spawned, never forked (egglog starts a Rust thread pool at import, and a forked child of
a process holding one can deadlock). Three things differ from a plain spawn pool:
  - A spawned child re-runs the parent's `__main__` script unless it is guarded by
    `if __name__ == "__main__":`. Workers need nothing from it (every task is a function of Prism's
    own modules), so the script is hidden from multiprocessing while they start.
  - Workers start with SIGINT blocked: Ctrl-C reaches the parent alone, and `run` kills the workers
    on any exception (KeyboardInterrupt included) instead of waiting for the checks they are running.
  - Workers die with their parent: each watches the process that started it (`_watch_parent`) and exits when
    that one is gone (killed by a timeout, crashed), instead of living on under init, using CPU and holding
    the parent's stdout open.
  - Where workers cannot be started at all (a daemon process, a child that is itself still starting,
    no OS support), or would not compute what this process does (an op registered at run time, which a
    worker, building the op table by import, lacks), `start` warns once per reason and returns None, and
    callers work in this process.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing, contextmanager
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any, Callable, Iterator, Sequence

__all__ = ["GC_THRESHOLD", "alive", "collect", "completed", "fewer_collections", "importable", "kill", "run",
           "sigint_blocked", "start", "unavailable"]

GC_THRESHOLD = (100_000, 50, 100)
"""A worker's thresholds for Python's cyclic garbage collector (the default is 700, 10, 10). Its tasks build and
drop many small graphs whose objects hold cycles (a tensor handle points to its graph). With the default
thresholds a collection ran every 700 allocations, and the collections took a large share of instantiating a
candidate. A young generation of 100,000 objects is collected a hundred times less often, and what dies young
is freed by reference counts, never walked. The imports that a worker's initializer made are frozen
(`gc.freeze`): they live as long as the worker and are not walked again."""

_COLLECTING = {"users": 0, "saved": None}
_COLLECTING_LOCK = threading.Lock()

_UNAVAILABLE: list[str] = []
"""Why this process cannot start workers, once a start has failed (later starts are not tried)."""
_WARNED: set[str] = set()
_KILLED: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()
"""Pools `kill` stopped (after a task's exception, a dead worker or Ctrl-C): one kept for later work is not."""


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """Hold Ctrl-C back (it is delivered on leaving); a process spawned meanwhile inherits it blocked."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def _main_hidden() -> Iterator[None]:
    """Make `__main__` look like an interactive session's, which spawned children do not re-run."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


class _Worker(SpawnProcess):
    """A spawned process that neither re-runs the parent's script nor sees Ctrl-C."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        with _main_hidden(), sigint_blocked():
            return SpawnProcess._Popen(process_obj)


class _Spawn(SpawnContext):
    """The spawn context, starting `_Worker`s (what ProcessPoolExecutor takes to start its processes)."""

    Process = _Worker


def importable(fn: Callable[..., Any]) -> bool:
    """Whether a worker can import `fn` by name (not a lambda, a local function, or the `__main__` script's)."""
    return getattr(fn, "__module__", "__main__") != "__main__" and "<" not in getattr(fn, "__qualname__", "<")


def unavailable() -> str | None:
    """Why work must stay in this process now (module docstring), or None."""
    if _UNAVAILABLE:
        return f"cannot start worker processes ({_UNAVAILABLE[0]})"
    from prism.ir.kinds import runtime_names

    added = runtime_names()
    return f"op(s) {', '.join(added)} registered at run time, which worker processes would not have" if added else None


@contextmanager
def fewer_collections() -> Iterator[None]:
    """GC_THRESHOLD in this process while Prism's work runs in it (a search, a tuning; several at once on the
    backend's threads), the thresholds it had put back when the last of them ends. Nothing is frozen here:
    the objects are the user's. Also a decorator."""
    with _COLLECTING_LOCK:
        if not _COLLECTING["users"]:
            _COLLECTING["saved"] = gc.get_threshold()
            gc.set_threshold(*GC_THRESHOLD)
        _COLLECTING["users"] += 1
    try:
        yield
    finally:
        with _COLLECTING_LOCK:
            _COLLECTING["users"] -= 1
            if not _COLLECTING["users"]:
                gc.set_threshold(*_COLLECTING["saved"])


PARENT_POLL = 0.5
"""Seconds between a worker's looks at its parent (`_watch_parent`)."""


def _watch_parent() -> None:
    """Exit this worker when the process that started it is gone: the worker is then re-parented (to init or a
    subreaper), so its parent's pid changes. A thread that polls, not a parent-death signal: Linux sends that
    when the *thread* that spawned the worker ends, and a pool started by one of the backend's threads outlives
    it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="prism-parent-watch", daemon=True).start()


def _initialized(initializer: Callable[[], Any] | None) -> None:
    """A worker's start: the watch on its parent, `initializer`, then the collector set for its tasks
    (GC_THRESHOLD)."""
    _watch_parent()
    if initializer is not None:
        initializer()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def start(n: int, initializer: Callable[[], Any] | None = None) -> ProcessPoolExecutor | None:
    """A pool of `n` started workers (each has run `initializer`), or None when work must stay in this process
    (`unavailable`; a RuntimeWarning says why, once per reason)."""
    why = unavailable()
    if why is None:
        pool = None
        try:
            pool = ProcessPoolExecutor(n, mp_context=_Spawn(), initializer=_initialized, initargs=(initializer,))
            run(pool, os.getpid, [()] * n)
            return pool
        except Exception as e:  # KeyboardInterrupt passes: the caller was interrupted, not refused
            if pool is not None:
                kill(pool)
            _UNAVAILABLE.append(f"{type(e).__name__}: {e}")
            why = unavailable()
    if why not in _WARNED:
        _WARNED.add(why)
        warnings.warn(f"prism: {why}; working in this process instead", RuntimeWarning, stacklevel=2)
    return None


def completed(pool: ProcessPoolExecutor, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
    """(i, fn(*tasks[i])) for every task on `pool`, as each finishes. On any exception (a task's, a dead
    worker, Ctrl-C) or when the caller closes the iterator early, the pool is killed first."""
    try:
        with sigint_blocked():  # a worker spawned by submit must be on the books before Ctrl-C can land
            futures = [pool.submit(fn, *t) for t in tasks]
        index = {f: i for i, f in enumerate(futures)}
        for f in as_completed(futures):
            yield index[f], f.result()
    except BaseException:  # GeneratorExit included: a caller that stops reading stops the workers
        kill(pool)
        raise


def run(pool: ProcessPoolExecutor, fn: Callable[..., Any], tasks: Sequence[tuple],
        done: Callable[[int], None] | None = None) -> list[Any]:
    """fn(*task) for every task on `pool`, results in task order; `done(i)` as task i finishes. On any
    exception (a task's, a dead worker, Ctrl-C) the pool is killed before the exception goes on."""
    return collect(completed(pool, fn, tasks), len(tasks), None if done is None else lambda i, _: done(i))


def collect(results: Iterator[tuple[int, Any]], n: int,
            done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """The n results of an iterator of (i, result) pairs, in order of i; `done(i, result)` as each
    arrives. The iterator is closed on the way out, so an exception here (Ctrl-C in `done`) stops its
    work too."""
    out: list[Any] = [None] * n
    with closing(results):  # type: ignore[type-var]
        for i, r in results:
            out[i] = r
            if done is not None:
                done(i, r)
    return out


def alive(pool: ProcessPoolExecutor) -> bool:
    """`pool` takes tasks still: `kill` has not stopped it."""
    return pool not in _KILLED


def kill(pool: ProcessPoolExecutor) -> None:
    """Stop `pool` now: kill its workers, whatever they are running, and drop its queued tasks."""
    _KILLED.add(pool)
    for p in list((pool._processes or {}).values()):  # no public way to do this before Python 3.14
        p.kill()
    pool.shutdown(wait=False, cancel_futures=True)
