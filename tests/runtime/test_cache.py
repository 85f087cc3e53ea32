"""The SQLite result cache: a hit does no work; every kind of corrupt entry is discarded and recomputed."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time

import pytest
import torch

import prism.runtime.pipeline as pipeline
import prism.workloads as wl
from prism.runtime import ResultCache, superoptimize
from prism.runtime.cache import FILENAME, default_path

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")


@pytest.fixture
def counted(monkeypatch):
    """Counts the expensive phases: tuning and searching."""
    calls = {"tune": 0, "search": 0}
    tune, search = pipeline.tune, pipeline._search

    def counting_tune(*a, **k):
        calls["tune"] += 1
        return tune(*a, **k)

    def counting_search(*a, **k):
        calls["search"] += 1
        return search(*a, **k)

    monkeypatch.setattr(pipeline, "tune", counting_tune)
    monkeypatch.setattr(pipeline, "_search", counting_search)
    return calls


@pytest.fixture
def swiglu(searched):
    return searched("swiglu")


def _run(swiglu, cache, cfg=None, **kw):
    w, small, result = swiglu
    return superoptimize(w.build(cfg or small), search_result=result, budget=2, compile=False, cache=cache,
                         device="cpu", **kw)


def _correct(opt, swiglu, cfg=None):
    w, small, _ = swiglu
    xs = w.inputs(cfg or small, seed=3)
    want = w.reference(*[x.double() for x in xs])
    return torch.allclose(opt(*xs)[0].double(), want, rtol=2e-2, atol=2e-3)


def test_a_second_call_is_a_hit_and_does_no_work(swiglu, tmp_path, counted):
    first = _run(swiglu, tmp_path)
    assert counted["tune"] == 1 and not first.report.cached
    second = _run(swiglu, tmp_path)
    assert counted["tune"] == 1
    assert second.report.cached and "result cache" in str(second.report)
    assert second.graph.structural_hash() == first.graph.structural_hash()
    assert second.report.table() == first.report.table()
    assert list(second.report.seconds) == list(first.report.seconds)  # phases in the order they ran, ...
    assert list(second.report.space) == list(first.report.space)      # ... not sorted by name on the way
    assert _correct(second, swiglu)


def test_a_hit_skips_the_search_too(tmp_path, counted):
    w = wl.get("swiglu")
    g = w.build({"n": 4, "d": 64})
    opts = {"workers": 1, "max_block_ops": 9, "max_grid": 1}
    superoptimize(g, search_options=opts, budget=2, compile=False, cache=tmp_path, device="cpu")
    superoptimize(g, search_options=opts, budget=2, compile=False, cache=tmp_path, device="cpu")
    assert counted == {"tune": 1, "search": 1}


def test_threads_searching_one_program_at_two_sizes_search_it_once(tmp_path, counted, monkeypatch):
    """The backend searches its cones on threads at once: a program alike but for its sizes is searched by the
    first thread, and the second waits for that search and takes it from the cache."""
    import threading

    search, both = pipeline._search, threading.Barrier(2)

    def slow(*a, **k):           # still searching when the other thread asks
        time.sleep(0.5)
        return search(*a, **k)

    monkeypatch.setattr(pipeline, "_search", slow)
    w, opts = wl.get("swiglu"), {"workers": 1, "max_block_ops": 9, "max_grid": 1}
    found = {}

    def run(d):
        both.wait()
        found[d] = pipeline.cached_search(w.build({"n": 4, "d": d}), opts, tmp_path)

    threads = [threading.Thread(target=run, args=(d,)) for d in (64, 128)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counted["search"] == 1
    assert sorted(r.stats.get("source", "searched") for r in found.values()) == ["search cache", "searched"]
    assert found[64].to_json()["graphs"] == found[128].to_json()["graphs"]


def test_shapes_dtypes_and_targets_are_part_of_the_key(swiglu, tmp_path, counted):
    _run(swiglu, tmp_path)
    _run(swiglu, tmp_path, cfg={"n": 4, "d": 128})
    assert counted["tune"] == 2
    _run(swiglu, tmp_path, target="h200")
    assert counted["tune"] == 3
    w, cfg, result = swiglu
    superoptimize(w.build(cfg, "float32"), search_result=result, budget=2, compile=False, cache=tmp_path,
                  device="cpu")
    assert counted["tune"] == 4
    _run(swiglu, tmp_path, cfg={"n": 4, "d": 128})
    assert counted["tune"] == 4
    assert len(ResultCache(tmp_path)) == 4


def test_where_the_cache_lives(swiglu, tmp_path, monkeypatch, counted):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "env"))
    assert ResultCache().path == default_path() == tmp_path / "env" / FILENAME
    _run(swiglu, True)
    assert (tmp_path / "env" / FILENAME).exists()
    _run(swiglu, str(tmp_path / "arg" / "mine.sqlite"))
    assert (tmp_path / "arg" / "mine.sqlite").exists()
    monkeypatch.delenv("PRISM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "prism" / FILENAME
    before = counted["tune"]
    _run(swiglu, False)
    _run(swiglu, False)
    assert counted["tune"] == before + 2 and not (tmp_path / "xdg").exists()


# ---- corrupt entries ---------------------------------------------------------------------------

def _rows(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT key, payload FROM results").fetchall()


def _write(path, key, payload, length=None, checksum=None):
    with sqlite3.connect(path) as con:
        con.execute("UPDATE results SET payload = ?, length = ?, checksum = ? WHERE key = ?",
                    (payload, len(payload) if length is None else length,
                     hashlib.sha256(payload.encode()).hexdigest() if checksum is None else checksum, key))


def _flip(payload: str) -> str:
    i = payload.index('"loop"')
    return payload[:i] + '"lOop"' + payload[i + 6:]


def _stale_graph(payload: str) -> str:
    doc = json.loads(payload)
    doc["graph"]["version"] = 99
    return json.dumps(doc)


def _other_shapes(payload: str) -> str:
    doc = json.loads(payload)
    doc["graph"]["nodes"][0]["outputs"][0]["shape"] = [4, 32]
    return json.dumps(doc)


CORRUPTIONS = {
    "checksum mismatch": lambda path, key, p: _write(path, key, _flip(p),
                                                     checksum=hashlib.sha256(p.encode()).hexdigest()),
    "truncated row": lambda path, key, p: _write(path, key, p[: len(p) // 2], length=len(p),
                                                 checksum=hashlib.sha256(p.encode()).hexdigest()),
    "bad JSON": lambda path, key, p: _write(path, key, p[:-1] + ",}"),
    "graph no longer loads": lambda path, key, p: _write(path, key, _stale_graph(p)),
    "graph of other shapes": lambda path, key, p: _write(path, key, _other_shapes(p)),
    "wrong format": lambda path, key, p: _write(path, key, json.dumps({"format": "something else"})),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_corrupt_entry_is_discarded_and_recomputed(swiglu, tmp_path, counted, kind):
    first = _run(swiglu, tmp_path)
    db = tmp_path / FILENAME
    ((key, payload),) = _rows(db)
    CORRUPTIONS[kind](db, key, payload)
    again = _run(swiglu, tmp_path)
    assert counted["tune"] == 2, "the corrupt entry must not be returned"
    assert not again.report.cached
    assert any("discarded entry" in n for n in again.report.notes), again.report.notes
    assert again.graph.structural_hash() == first.graph.structural_hash() and _correct(again, swiglu)
    third = _run(swiglu, tmp_path)                       # the recomputed entry was written back whole
    assert counted["tune"] == 2 and third.report.cached


@pytest.mark.parametrize("damage", ["garbage", "truncated file"])
def test_a_corrupt_database_file_is_set_aside(swiglu, tmp_path, counted, damage):
    _run(swiglu, tmp_path)
    db = tmp_path / FILENAME
    if damage == "garbage":
        db.write_bytes(b"this is not a database " * 400)
    else:
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
    again = _run(swiglu, tmp_path)
    assert counted["tune"] == 2 and _correct(again, swiglu)
    third = _run(swiglu, tmp_path)
    assert counted["tune"] == 2 and third.report.cached
    if damage == "garbage":
        assert list(tmp_path.glob(f"{FILENAME}.corrupt-*"))
        assert any("not a usable SQLite database" in n for n in again.report.notes)


def test_the_cache_on_its_own(tmp_path):
    c = ResultCache(tmp_path / "c.sqlite")
    assert c.get("k") is None and c.misses == 1
    c.put("k", {"a": [1, 2]}, {"why": "test"})
    assert c.get("k") == {"a": [1, 2]} and c.hits == 1
    assert c.get("k", validate=lambda v: v["a"][1]) == 2

    def reject(v):
        raise ValueError("stale")
    assert c.get("k", validate=reject) is None
    assert c.keys() == [] and "stale" in c.events[-1]
    c.put("a", 1)
    c.put("b", 2)
    assert len(c) == 2
    c.clear()
    assert len(c) == 0


def test_the_search_key_ignores_where_inputs_are_declared_and_sizes():
    """The backend's lowering declares each input where it is first read; a program resized to another size
    declares them first. Both are one program: one search result serves them (no second search)."""
    import prism

    def attention(kv: int, late: bool) -> prism.KernelGraph:
        g = prism.KernelGraph()
        q, kt = g.input((8, 1, 16), "float32", "Q"), g.input((8, 16, kv), "float32", "Kt")
        v = None if late else g.input((8, kv, 16), "float32", "V")
        e = g.exp(g.mul_scalar(g.matmul(q, kt), 0.25))
        v = v if v is not None else g.input((8, kv, 16), "float32", "V")
        g.output(g.matmul(g.div(e, g.sum(e, 2)), v))
        return g

    late, early = attention(6, late=True), attention(8, late=False)
    assert late.structural_hash(shapes=False) != early.structural_hash(shapes=False)   # the node order differs
    assert pipeline._size_free(late) == pipeline._size_free(early)
    other = prism.KernelGraph()
    x = other.input((8, 1, 16), "float32", "Q")
    other.output(other.exp(x))
    assert pipeline._size_free(other) != pipeline._size_free(early)
