"""A script that searches with worker processes needs no `if __name__ == "__main__":` guard, saved as a
file or piped to `python -`; where workers cannot be started the search runs in this process, says so
once, and finds the same graphs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import prism.workloads as wl
from prism import pool
from prism.search import parallel, search

from tests.child import child_env

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {"max_block_ops": 10, "max_grid": 1}
SCRIPT = f"""\
import prism
g = prism.workloads.get("rmsnorm").build({{"n": 4, "d": 64}})
r = prism.search(g, workers=2, **{LIMITS!r})
print(r.stats["workers"])
print("\\n".join(r.describe(i) for i in range(len(r))))
"""


def _describe(result) -> str:
    return "\n".join(result.describe(i) for i in range(len(result)))


@pytest.fixture(scope="module")
def program():
    return wl.get("rmsnorm").build({"n": 4, "d": 64})


@pytest.fixture(scope="module")
def in_process(program) -> str:
    result = search(program, workers=1, **LIMITS)
    assert len(result) > 0  # the comparisons with it would pass on empty results
    return _describe(result)


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_script_without_main_guard_searches_with_workers(tmp_path, in_process, how):
    (tmp_path / "unguarded.py").write_text(SCRIPT)
    env = child_env(tmp_path)
    argv, stdin = ([sys.executable, "unguarded.py"], None) if how == "file" else ([sys.executable, "-"], SCRIPT)
    p = subprocess.run(argv, input=stdin, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    workers, found = p.stdout.split("\n", 1)
    assert workers == "2" and found.strip() == in_process


def test_without_workers_the_search_runs_here_and_says_so_once(monkeypatch, program, in_process):
    def no_processes(*args, **kwargs):
        raise OSError("no semaphores here")

    monkeypatch.setattr(pool, "ProcessPoolExecutor", no_processes)
    monkeypatch.setattr(pool, "_UNAVAILABLE", [])
    monkeypatch.setattr(parallel, "_POOLS", {})
    with pytest.warns(RuntimeWarning, match=r"cannot start worker processes \(OSError: no semaphores here\)") as seen:
        results = [search(program, workers=2, **LIMITS) for _ in range(2)]
    assert len([m for m in seen if "cannot start" in str(m.message)]) == 1
    for r in results:
        assert r.stats["workers"] == 1 and _describe(r) == in_process
