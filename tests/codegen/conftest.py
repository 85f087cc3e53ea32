"""Starts the interpreter runner (a subprocess with TRITON_INTERPRET=1) as soon as collection ends, so
it works through the selected interpreter cases while this process compiles kernels ahead of time.

Under pytest-xdist every worker collects every test, and a runner started by each would interpret every case
once per worker. There the interpreter's tests are one `xdist_group` (the README's test command distributes by
group), so one worker runs them all, and that worker starts the runner when its first interpreter test asks for
the results; the other workers meanwhile run the rest. A worker that asks for them too joins that runner rather
than start a second one (`_start`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_RUN: dict = {}
INTERPRETED = ("test_interpret.py", "test_ragged.py")
"""The test files whose `case` parameters name interpreter cases (tests/codegen/cases.py, ragged_cases.py)."""


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(session, config, items):
    names = [item.callspec.params["case"] for item in items
             if item.path.name in INTERPRETED and "case" in getattr(getattr(item, "callspec", None), "params", {})]
    for item in items:
        if "interp_results" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("interpreter"))
    if not names or _RUN:
        return
    _RUN["names"] = names
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _start()


def _start() -> None:
    """Start the runner, or under xdist join the one another worker of this run started first (the folder named
    by the run's id is made by exactly one worker: `mkdir` is atomic)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        folder = Path(tempfile.gettempdir()) / f"prism-interp-{run}"
        try:
            folder.mkdir()
        except FileExistsError:
            _RUN.update(proc=None, folder=folder)
            return
    else:
        folder = Path(tempfile.mkdtemp(prefix="prism-interp-"))
    env = dict(os.environ, TRITON_INTERPRET="1", PRISM_CACHE_DIR=str(folder / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    log = open(folder / "log.txt", "w")
    cmd = [sys.executable, "-m", "tests.codegen.interp_runner", str(folder / "results.json"),
           *dict.fromkeys(_RUN["names"])]
    _RUN.update(proc=subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
                folder=folder, log=log, started=time.time())


def _wait() -> int:
    """The runner's exit status, once it has ended; the worker that started it records the status in `exit`."""
    proc, folder = _RUN["proc"], _RUN["folder"]
    if proc is None:   # another worker's runner
        deadline = time.time() + 900
        while not (folder / "exit").exists() and time.time() < deadline:
            time.sleep(1)
        return int((folder / "exit").read_text()) if (folder / "exit").exists() else -1
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _RUN["log"].close()
    (folder / "exit").write_text(str(proc.returncode))
    return proc.returncode


@pytest.fixture(scope="session")
def interp_results() -> dict:
    """{case: result} from the runner (waits for it); results carry ok, error, max_rel_err, wall."""
    if not _RUN:
        pytest.skip("no interpreter case was collected")
    if "proc" not in _RUN:
        _start()
    status, folder = _wait(), _RUN["folder"]
    path = folder / "results.json"
    if not path.exists():
        tail = (folder / "log.txt").read_text()[-4000:]
        pytest.fail(f"the interpreter runner produced no results (exit {status}):\n{tail}")
    return json.loads(path.read_text())


def pytest_sessionfinish(session, exitstatus):
    if _RUN.get("proc") is None:
        return
    if _RUN["proc"].poll() is None:   # e.g. interrupted: stop our runner
        _RUN["proc"].kill()
        _RUN["proc"].wait()
    if exitstatus == 0:               # on failure keep the generated modules and the log for a look
        _RUN["log"].close()
        shutil.rmtree(_RUN["folder"], ignore_errors=True)
