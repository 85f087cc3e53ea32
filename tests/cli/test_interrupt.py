"""Ctrl-C while worker processes verify candidates: the command ends within 2 s with one line and exit
130, leaving no traceback and no output behind. SIGINT goes to the command's whole process group, as
a terminal sends it: the workers see it too, and must neither die noisily nor be waited for. Pressed twice,
as an impatient user does, the second lands while the process exits, and must print nothing either."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prism.cli import EXIT_INTERRUPTED

from tests.child import child_env

ROOT = Path(__file__).resolve().parents[2]
VERIFYING = re.compile(r"search: verify:\s+\d+%\|[^|]*\|\s*[1-9]\d*/\d+")
"""A progress bar line once workers have finished a first chunk of checks (so they are mid-verify)."""


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_verification_ends_at_once(tmp_path, presses):
    work = tmp_path / "work"
    work.mkdir()
    env = child_env(tmp_path, PRISM_CACHE_DIR=str(tmp_path / "cache"))
    # RMSNorm-MLP: its checks take seconds after the first chunk is back (RMSNorm's end within half a second of
    # it, so on a loaded machine the interrupt could arrive after the search had finished)
    proc = subprocess.Popen([sys.executable, "-m", "prism", "search", "rmsnorm_mlp", "--workers", "2"], cwd=work,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180  # start-up on a slow machine: imports, spawning workers, generation
    while not VERIFYING.search("".join(err)):
        assert proc.poll() is None, "".join(err)
        assert time.monotonic() < deadline, "never saw the workers verify:\n" + "".join(err)
        time.sleep(0.05)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    if presses == 2:
        time.sleep(0.3)
        with contextlib.suppress(ProcessLookupError):  # it may be gone already
            os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    took = time.monotonic() - sent
    reader.join(timeout=10)
    text = "".join(err)
    assert code == EXIT_INTERRUPTED, text
    assert took < 2.0, f"took {took:.2f} s to stop"
    assert text.endswith("prism: interrupted\n") and "Traceback" not in text, text
    assert list(work.iterdir()) == []  # no prism-out/, no half-written search.json


def test_ctrl_c_at_any_moment_of_a_tuning_ends_at_once(tmp_path):
    """`prism tune` interrupted in its imports and while it works: exit 130 within 2 s each time, one line, no
    traceback (the process ends without joining its pools' threads, which could wait
    on killed workers for minutes). `python benchmarks/interrupts.py` does this 50 times at random moments."""
    from benchmarks.interrupts import LIMIT_S, interrupted

    work = tmp_path / "work"
    work.mkdir()
    env = child_env(tmp_path, PRISM_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-m", "prism", "search", "rmsnorm", "--quiet"], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    runs = [interrupted(["tune", "prism-out/rmsnorm/search.json", "--no-cache"], delay, work, env)
            for delay in (0.5, 5.0)]
    hit = [r for r in runs if r["took_s"] is not None]
    assert len(hit) == 2, runs                     # a tuning takes longer than 5 s even on a quiet machine
    for r in hit:
        assert r["code"] == EXIT_INTERRUPTED and r["took_s"] < LIMIT_S, r
        assert r["last_line"] == "prism: interrupted" and not r["traceback"], r


SWALLOWING = """
import sys, time
import prism.cli as cli

def check(args):  # library code that swallows the KeyboardInterrupt and goes on working
    print("working", file=sys.stderr, flush=True)
    while True:
        try:
            time.sleep(0.01)
        except KeyboardInterrupt:
            pass

cli._check = check
sys.argv = ["prism", "check", "rmsnorm"]
raise SystemExit(cli.main())
"""


def test_ctrl_c_that_library_code_swallows_still_ends_the_command(tmp_path):
    """The backstop: a Ctrl-C whose KeyboardInterrupt never reaches `main` ends the process within 2 s all the same,
    with exit 130 and one line (without the backstop, this command would run until killed)."""
    from benchmarks.interrupts import LIMIT_S

    proc = subprocess.Popen([sys.executable, "-c", SWALLOWING], cwd=tmp_path, env=child_env(tmp_path),
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr.readline() == "working\n"
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert code == EXIT_INTERRUPTED and took < LIMIT_S, (code, took)
    assert proc.stderr.read() == "prism: interrupted\n"


FINISHING = """
import atexit, sys, threading, time
from pathlib import Path
import prism.cli as cli

folder = Path(sys.argv[1])

def check(args):  # a run that leaves an exit handler, a thread still working, and its output unflushed
    print("done", end="\\n", flush=False)
    atexit.register(lambda: (folder / "handler").write_text("ran"))
    threading.Thread(target=lambda: (time.sleep(0.5), (folder / "thread").write_text("ran"))).start()
    return 2

cli._check = check
sys.argv = ["prism", "check", "rmsnorm"]
raise SystemExit(cli.main())
"""


def test_a_finished_run_exits_as_python_would_with_its_code(tmp_path):
    """The entry point ends a finished run itself (so that a Ctrl-C during the exit still exits 130): the threads
    an exit waits for are waited for, the exit handlers run, the output is flushed, and the code is the run's."""
    done = subprocess.run([sys.executable, "-c", FINISHING, str(tmp_path)], cwd=tmp_path, env=child_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (2, "done\n", "")
    assert (tmp_path / "handler").read_text() == (tmp_path / "thread").read_text() == "ran"


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_run_that_fails_after_a_ctrl_c_is_interrupted_not_a_bug(interrupted, monkeypatch, capsys):
    """A Ctrl-C that lands inside an extension module's import (numpy's, under torch's) can come back as an
    ImportError, then or at a later import ("cannot load module more than once per process"): after a Ctrl-C that
    is the interrupt (exit 130, one line), and without one a bug (exit 3)."""
    import prism.cli as cli

    def broken(args):
        raise ImportError("cannot load module more than once per process")

    monkeypatch.setattr(cli, "_check", broken)
    monkeypatch.setattr(cli._Interrupts, "seen", interrupted)
    before = signal.getsignal(signal.SIGINT)
    try:
        code = cli.main(["check", "rmsnorm"])
    finally:
        signal.signal(signal.SIGINT, before)     # an interrupted in-process run ignores further Ctrl-C
    err = capsys.readouterr().err
    if interrupted:
        assert code == EXIT_INTERRUPTED and err == "prism: interrupted\n"
    else:
        assert code == 3 and "internal error: ImportError: cannot load module" in err


TWO_ENDS = """
import os, threading, time
import multiprocessing.util
import prism.cli as cli

log = []
def finalizers(minpriority):  # multiprocessing's semaphore cleanup, slow: unlink, then unregister
    log.append("unlink")
    time.sleep(0.5)
    log.append("unregistered")
multiprocessing.util._run_finalizers = finalizers
real_exit = os._exit
def exit_(code):
    print(log, flush=True)
    real_exit(code)
os._exit = exit_
backstop = threading.Thread(target=cli._end, args=(130,))
backstop.start()
time.sleep(0.1)
cli._end(130)
"""


def test_two_threads_ending_the_process_let_the_first_finish_its_cleanup(tmp_path):
    """The interrupt's backstop timer and the main thread can both end the process (`prism.cli._end`): the second
    waits, so the first's semaphore cleanup is never cut short by the other's exit (a semaphore unlinked but still
    registered makes multiprocessing's resource tracker print warnings after "prism: interrupted")."""
    done = subprocess.run([sys.executable, "-c", TWO_ENDS], env=child_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == EXIT_INTERRUPTED, done.stderr
    assert done.stdout == "['unlink', 'unregistered']\n", done.stdout


FINALIZER_ELSEWHERE = """
import os, threading, time
import multiprocessing.util
import prism.cli as cli

log = []
class Owner:  # what a pool's queue is to its semaphore
    pass
def cleanup():  # a semaphore's finalizer, slow: unlink, then unregister
    log.append("unlink")
    started.set()
    time.sleep(0.2)
    log.append("unregistered")
owner = Owner()
multiprocessing.util.Finalize(owner, cleanup, exitpriority=0)
started = threading.Event()
def drop():  # the last reference dropped in another thread, as a pool's manager thread or a collection does
    global owner
    owner = None
threading.Thread(target=drop).start()
started.wait()
real_exit = os._exit
def exit_(code):
    print(log, flush=True)
    real_exit(code)
os._exit = exit_
cli._end(130)
"""


def test_ending_the_process_waits_for_a_finalizer_another_thread_is_running(tmp_path):
    """A semaphore's finalizer running in another thread (a pool's manager thread dropping a queue, a garbage
    collection there) when the process ends is let finish: cut between its unlink and its unregistering, the
    resource tracker would print "leaked semaphore objects" after "prism: interrupted"."""
    done = subprocess.run([sys.executable, "-c", FINALIZER_ELSEWHERE], env=child_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == EXIT_INTERRUPTED, done.stderr
    assert done.stdout == "['unlink', 'unregistered']\n", done.stdout
