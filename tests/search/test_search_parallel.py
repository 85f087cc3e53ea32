"""Worker processes (spawned) return exactly what a one-process search returns."""

import prism.workloads as wl
from prism.search import driver, search
from tests.configs import small_cfg


def _comparable(result):
    stats = {phase: {k: v for k, v in result.stats[phase].items() if "seconds" not in k}
             for phase in ("generate", "instantiate", "prefilter", "verify")}
    return [result.describe(i) for i in range(len(result))], stats


def test_two_workers_give_the_same_graphs_and_counts_as_one(monkeypatch):
    monkeypatch.setattr(driver, "INLINE_STATES", 40)  # hand most of the generation to the workers
    monkeypatch.setattr(driver, "CHUNK", 8)  # and split the checks into many tasks
    w = wl.get("attention")
    program = w.build(small_cfg(w))
    one = search(program, workers=1, max_block_ops=9, max_grid=2)
    two = search(program, workers=2, max_block_ops=9, max_grid=2)
    assert two.stats["workers"] == 2 and one.stats["workers"] == 1
    assert _comparable(one) == _comparable(two)
    assert len(one) > 0


def test_prefilter_tasks_hold_whole_structures():
    """A structure's one-dim prefilter verdicts live in the worker that checks it: no structure is split."""
    a, b, c = object(), object(), object()
    pairs = [(a, 0), (a, 1), (a, 2), (b, 0), (c, 0), (c, 1), (c, 2), (c, 3)]
    chunks = driver._by_structure(pairs, 2)
    assert [p for chunk in chunks for p in chunk] == pairs
    assert [[m for _, m in chunk] for chunk in chunks] == [[0, 1, 2], [0, 0, 1, 2, 3]]
    assert driver._by_structure(pairs, 100) == [pairs]
