"""The cyclic garbage collector while Prism works (prism.pool.GC_THRESHOLD): a worker collects rarely and has
its imports frozen; this process collects rarely during a search or tuning, and gets back its own thresholds
when the last one ends, whichever thread ends it."""

from __future__ import annotations

import gc
import threading

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
