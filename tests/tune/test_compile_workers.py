"""Compile workers kept across the tunings of one scope (prism.tune.compile.kept_workers): a loop of tunings
starts them once, and they are gone when the scope ends."""

from __future__ import annotations

import os

import pytest

import prism.pool
from prism.tune import tune
from prism.tune.compile import kept_workers, release, start_workers


def _counting(monkeypatch) -> list[int]:
    """Every pool.start call's worker count, recorded as it happens."""
    starts: list[int] = []
    real = prism.pool.start

    def start(n, initializer=None):
        starts.append(n)
        return real(n, initializer)

    monkeypatch.setattr(prism.pool, "start", start)
    return starts


def _stopped(p) -> bool:
    try:
        p.submit(os.getpid).result()
    except RuntimeError:         # cannot schedule new futures after shutdown
        return True
    return False


def test_tunings_in_a_scope_start_their_compile_workers_once(searched, monkeypatch):
    w, cfg, result = searched("swiglu")
    starts = _counting(monkeypatch)
    with kept_workers():
        first = tune(result, w.build(cfg), budget=2, workers=2, seed=0).report
        second = tune(result, w.build(cfg), budget=2, workers=2, seed=1).report
        kept = start_workers(2)
        assert not _stopped(kept)
    assert starts == [2]
    assert first.seconds["compile"] > 0 and second.seconds["compile"] > 0
    assert all(e.ok for e in first.entries + second.entries)
    assert _stopped(kept)        # shut down with the scope


def test_outside_a_scope_each_tuning_starts_and_stops_its_own(monkeypatch):
    starts = _counting(monkeypatch)
    a = start_workers(2)
    release(a)
    b = start_workers(2)
    release(b)
    assert starts == [2, 2] and a is not b and _stopped(a) and _stopped(b)


def test_a_pool_killed_in_a_scope_is_replaced_and_release_leaves_a_kept_one_running(monkeypatch):
    starts = _counting(monkeypatch)
    with kept_workers():
        a = start_workers(2)
        release(a)                         # a tuning's end: the scope keeps it
        assert not _stopped(a) and start_workers(2) is a
        prism.pool.kill(a)                 # as pool.run does on a task's exception
        b = start_workers(2)
        assert b is not a and not _stopped(b)
    assert starts == [2, 2] and _stopped(b)


def test_nested_scopes_keep_their_own_workers():
    with kept_workers():
        outer = start_workers(2)
        with kept_workers():
            inner = start_workers(2)
            assert inner is not outer
        assert _stopped(inner) and not _stopped(outer)
    assert _stopped(outer)


def test_a_scope_is_its_threads_own():
    """A background tuning (another thread) does not take a pool that this thread's scope will shut down."""
    import threading

    got = []
    with kept_workers():
        mine = start_workers(2)
        other = threading.Thread(target=lambda: got.append(start_workers(2)))
        other.start()
        other.join()
        assert got[0] is not mine
        release(got[0])
        assert _stopped(got[0]) and not _stopped(mine)


@pytest.fixture(autouse=True)
def _no_leftover_scope():
    from prism.tune import compile as c

    yield
    assert not c._scopes()


def test_kept_workers_compile_into_the_cache_the_caller_reads_now(searched, tmp_path, monkeypatch):
    """torch.compile sets TRITON_CACHE_DIR in its process (Inductor's first Triton kernel). Workers kept from
    before must compile, and on a GPU warm, into the folder the timing process reads now, not the one it read
    when they started: else every timed candidate is compiled again where it is timed."""
    from prism.tune.compile import compile_many
    from prism.tune.space import Space

    w, cfg, result = searched("swiglu")
    space = Space(result, w.build(cfg))
    first, second = (space.instantiate(c) for c in space.sample(2, seed=3))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "before"))
    with kept_workers():
        kept = start_workers(2)
        assert all(r.ok for r in compile_many([first], workers_pool=kept))
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "now"))
        assert all(r.ok for r in compile_many([second], workers_pool=kept))
    assert any((tmp_path / "now").iterdir())
