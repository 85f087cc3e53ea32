"""The Ray backend on a local Ray (2 CPUs, one session for the module): the same graphs as the local
search, a task whose worker dies run again, a task lost for good reported, Ctrl-C cancelling the tasks."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend's tests need ray (`pip install -e '.[test]'` installs it)")

import prism.workloads as wl
from prism.cli import EXIT_OK, main
from prism.search import SearchResult, cluster, driver, search
from prism.verify import equivalent
from tests.configs import small_cfg

LIMITS = {"rmsnorm": {"max_block_ops": 10, "max_grid": 1}, "attention": {"max_block_ops": 9, "max_grid": 2}}


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module; the verifiers defined here travel to its workers by value."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


@pytest.fixture
def small_tasks(monkeypatch):
    """Many tasks per search, so that several run at once and a failure hits one among many."""
    monkeypatch.setattr(driver, "INLINE_STATES", 40)
    monkeypatch.setattr(driver, "CHUNK", 8)
    monkeypatch.setattr(driver, "BATCH", 2)


def _program(name: str):
    w = wl.get(name)
    return w.build(small_cfg(w))


def _comparable(result: SearchResult):
    stats = {phase: {k: v for k, v in result.stats[phase].items() if "seconds" not in k}
             for phase in ("generate", "instantiate", "prefilter", "verify", "cross_check")}
    return [result.describe(i) for i in range(len(result))], stats


@pytest.mark.parametrize("name", ["rmsnorm", "attention"])
def test_ray_search_returns_what_the_local_search_returns(local_ray, small_tasks, name):
    program = _program(name)
    here = search(program, workers=1, **LIMITS[name])
    on_ray = search(program, backend="ray", **LIMITS[name])
    assert on_ray.stats["backend"] == "ray" and on_ray.stats["workers"] == 2
    assert len(here) > 0 and _comparable(on_ray) == _comparable(here)


class DieOnce:
    """A verifier whose first call, in whichever Ray worker, kills that worker process; later calls verify."""

    def __init__(self, marker: Path, always: bool = False) -> None:
        self.marker, self.always = marker, always

    def __call__(self, reference, candidate, **kwargs):
        try:
            self.marker.open("x").close()
            first = True
        except FileExistsError:
            first = False
        if first or self.always:
            os.kill(os.getpid(), signal.SIGKILL)
        return equivalent(reference, candidate, **kwargs)


def test_a_task_whose_worker_dies_is_run_again(local_ray, small_tasks, tmp_path):
    """Compared with a local search whose verifier is also a function of its own: such a verifier is called
    once per candidate, with no size constraints, so both reject the forms right only for some sizes."""
    program = _program("rmsnorm")
    here = search(program, workers=1, verify=lambda reference, candidate, **kwargs:
                  equivalent(reference, candidate, **kwargs), **LIMITS["rmsnorm"])
    marker = tmp_path / "killed"
    on_ray = search(program, backend="ray", verify=DieOnce(marker), **LIMITS["rmsnorm"])
    assert marker.exists()  # a worker was killed mid-search
    assert _comparable(on_ray) == _comparable(here)


def test_a_task_lost_for_good_stops_the_search_with_an_error(local_ray, tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "MAX_RETRIES", 1)  # and few tasks: every worker that verifies dies
    with pytest.raises(cluster.ClusterError, match=r"Ray task verify_task #\d+ was lost \(its worker died 2 times\)"):
        search(_program("rmsnorm"), backend="ray", verify=DieOnce(tmp_path / "killed", always=True),
               **LIMITS["rmsnorm"])


class FirstThenStall:
    """A verifier that answers its first call and stalls for two minutes in every later one (in short
    sleeps: a cancelled task is interrupted between two Python steps)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __call__(self, reference, candidate, **kwargs):
        try:
            self.marker.open("x").close()
        except FileExistsError:
            for _ in range(1200):
                time.sleep(0.1)
        return equivalent(reference, candidate, **kwargs)


def test_ctrl_c_cancels_the_running_tasks(local_ray, small_tasks, tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "BATCH", 1)

    interrupted = []

    def interrupt(phase, done, total):
        if phase == "verify" and done > 0:  # one verification task is back, the others are stalled
            interrupted.append(time.monotonic())
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        search(_program("rmsnorm"), backend="ray", verify=FirstThenStall(tmp_path / "first"), prefilter=False,
               progress=interrupt, **LIMITS["rmsnorm"])
    # the stalled tasks were interrupted and their CPUs freed well before a stalled task ends (120 s); a cancel
    # Ray loses is sent again, for 10 s by the caller (cluster.CANCEL_SECONDS), then by a thread, and on a loaded
    # 2-core machine the CPUs came back 30 s after the interrupt
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() - interrupted[0] < 60, ray.available_resources()
        time.sleep(0.1)


def test_the_command_line_searches_on_ray(local_ray, tmp_path, capsys):
    out = tmp_path / "search.json"
    argv = ["search", "rmsnorm", "--config", "n=4,d=64", "--max-block-ops", "10", "--out", str(out), "-q"]
    assert main([*argv, "--ray"]) == EXIT_OK
    on_ray = SearchResult.load(out)
    assert main([*argv, "--workers", "1"]) == EXIT_OK
    here = SearchResult.load(out)
    assert on_ray.stats["backend"] == "ray" and here.stats["backend"] == "local"
    assert [on_ray.describe(i) for i in range(len(on_ray))] == [here.describe(i) for i in range(len(here))]


def test_superoptimize_compiles_its_candidates_on_ray(local_ray, monkeypatch):
    """backend="ray": the tuner's ranking and its ahead-of-time compiles run as Ray tasks, with what a local run
    gets."""
    from prism.runtime import superoptimize

    ran = []
    on_ray = cluster.RayWorkers.map
    monkeypatch.setattr(cluster.RayWorkers, "map", lambda self, fn, tasks, done=None:
                        ran.append((fn.__name__, len(tasks))) or on_ray(self, fn, tasks, done))

    program = _program("swiglu")
    result = search(program, workers=1, max_block_ops=9, max_grid=1)
    runs = {}
    for backend in ("local", "ray"):
        with pytest.warns(RuntimeWarning, match="reference executor"):
            opt = superoptimize(program, search_result=result, budget=2, workers=1, cache=False, device="cpu",
                                backend=backend)
        runs[backend] = [(e.label, e.status, [(k["registers"], k["shared"]) for k in e.kernels])
                         for e in opt.report.entries]
    assert runs["ray"] == runs["local"] and any(kernels for _, _, kernels in runs["ray"])
    names = [fn for fn, _ in ran]       # the ranking's chunks (in rounds where it climbs), then the compiles
    assert names[0] == "rank_chunk" and set(names[:-1]) == {"rank_chunk"} and names[-1] == "compile_task"
    assert ran[-1] == ("compile_task", len(runs["ray"]))              # every candidate, the unfused baseline too
