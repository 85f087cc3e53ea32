"""Worker processes (prism.pool): the cyclic garbage collector while Prism works (GC_THRESHOLD: a worker
collects rarely and has its imports frozen; this process collects rarely during a search or tuning, and gets
back its own thresholds when the last one ends, whichever thread ends it), and workers that die with the process
that started them."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from prism import pool


def test_workers_collect_rarely_and_freeze_their_imports():
    started = pool.start(2)
    assert started is not None
    try:
        thresholds = pool.run(started, gc.get_threshold, [(), ()])
        frozen = pool.run(started, gc.get_freeze_count, [(), ()])
    finally:
        started.shutdown()
    assert thresholds == [pool.GC_THRESHOLD] * 2
    assert all(n > 0 for n in frozen), frozen


def test_this_process_gets_its_thresholds_back_after_the_last_user():
    mine = (1234, 11, 12)
    old = gc.get_threshold()
    gc.set_threshold(*mine)
    try:
        entered, leave = threading.Event(), threading.Event()

        def other():
            with pool.fewer_collections():
                entered.set()
                leave.wait(60)

        thread = threading.Thread(target=other)
        with pool.fewer_collections():
            assert gc.get_threshold() == pool.GC_THRESHOLD
            thread.start()
            assert entered.wait(60)
        assert gc.get_threshold() == pool.GC_THRESHOLD   # the other thread's work is still running
        leave.set()
        thread.join(60)
        assert gc.get_threshold() == mine

        @pool.fewer_collections()
        def work():
            return gc.get_threshold()

        assert work() == pool.GC_THRESHOLD and gc.get_threshold() == mine
    finally:
        gc.set_threshold(*old)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (not a zombie waiting for its new parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_exit_when_the_process_that_started_them_is_killed():
    """A compile killed mid-search (a timeout's SIGKILL) leaves no worker behind: each exits within a few polls
    of its parent's death. The parent here starts a pool, prints its workers' pids and hangs in a task."""
    script = textwrap.dedent("""
        import os, time
        from prism import pool
        started = pool.start(2)
        print(" ".join(map(str, pool.run(started, os.getpid, [(), ()]))), flush=True)
        pool.run(started, time.sleep, [(600,), (600,)])
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(map(_running, workers)), workers
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 20 * pool.PARENT_POLL + 10
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_running, workers)), [w for w in workers if _running(w)]
    finally:
        parent.kill()
