"""Choosing the search's backend: a missing Ray says which extra to install, wrong arguments are refused,
and a local search never imports Ray (its import takes seconds); a Ctrl-C's cancels reach a task its worker starts
late. None of these needs Ray installed."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import prism.workloads as wl
from prism.cli import EXIT_USAGE, main
from prism.errors import InputError
from prism.search import cluster, search
from tests.child import child_env
from tests.configs import SMALL

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'prism-superopt[ray]'"


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed


def test_a_ray_search_without_ray_names_the_extra(no_ray):
    with pytest.raises(InputError, match=r"backend='ray' needs Ray.*" + re.escape(INSTALL)):
        search(wl.get("rmsnorm").build(SMALL), backend="ray")


def test_the_command_line_without_ray_names_the_extra(no_ray, capsys, tmp_path):
    code = main(["search", "rmsnorm", "--config", "n=4,d=64", "--ray", "--out", str(tmp_path / "s.json")])
    assert code == EXIT_USAGE and INSTALL in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "dask"}, "backend must be one of 'local', 'ray', got 'dask'"),
    ({"ray_address": "10.0.0.1:6379"}, "ray_address is a Ray cluster's address for backend='ray'"),
    ({"backend": "ray", "ray_address": 6379}, "ray_address is a Ray cluster's address"),
])
def test_wrong_backend_arguments_are_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        search(wl.get("rmsnorm").build(SMALL), **kwargs)


def test_a_local_search_does_not_import_ray(tmp_path):
    code = ("import sys, prism\n"
            "g = prism.workloads.get('rmsnorm').build({'n': 4, 'd': 64})\n"
            "r = prism.search(g, workers=1, max_block_ops=10, max_grid=1)\n"
            "print(len(r) > 0, 'ray' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=child_env(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "False"]


class LateStart:
    """Ray as one cancelled task sees it when its worker starts it `after` seconds after the first cancel: a
    cancel sent before then is dropped (the worker has no such task yet), one sent after stops it."""

    class exceptions:
        RaySystemError = RuntimeError

    def __init__(self, after: float) -> None:
        self.after, self.first, self.stopped = after, None, threading.Event()

    def is_initialized(self) -> bool:
        return True

    def cancel(self, ref) -> None:
        now = time.monotonic()
        self.first = self.first or now
        if now - self.first >= self.after:
            self.stopped.set()

    def wait(self, refs, num_returns, timeout):
        time.sleep(timeout)
        return [], [] if self.stopped.is_set() else list(refs)


def test_a_task_its_worker_starts_after_the_callers_cancels_is_still_cancelled(monkeypatch):
    """The caller cancels for CANCEL_SECONDS and returns (Ctrl-C is prompt); a thread goes on cancelling, so a task
    that starts later is stopped all the same instead of running to its end."""
    monkeypatch.setattr(cluster, "CANCEL_SECONDS", 0.3)
    monkeypatch.setattr(cluster, "_WAIT", 0.05)
    ray = LateStart(after=2.0)
    workers = object.__new__(cluster.RayWorkers)   # no Ray here: only its cancels are exercised
    workers.ray = ray
    start = time.monotonic()
    workers._cancel(["task"])
    assert time.monotonic() - start < 2.0 and not ray.stopped.is_set()
    assert ray.stopped.wait(30)
