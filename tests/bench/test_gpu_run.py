"""benchmarks/gpu_run.py: one command for a GPU run. Its CPU half (the searches carried to the GPU) runs here;
its GPU half refuses in one line where it cannot run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "benchmarks" / "gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_runs_every_test_file_that_needs_a_gpu():
    marker = "cuda.is_available" + "()"     # written apart, so that this file is not one of them
    needing = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if marker in p.read_text())
    assert sorted(_script().GPU_TESTS) == needing


def test_its_default_steps_fit_one_device_call_and_every_step_fits_one():
    script = _script()
    assert sum(script.STEPS[name].limit for name in script.DEFAULT_STEPS) <= script.CALL_SECONDS
    for line in script.__doc__.splitlines():   # each call its docstring names fits one device call too
        if "--steps" in line and "run --wheels" in line:
            named = line.split("--steps ")[1].split()[0].split(",")
            assert sum(script.STEPS[name].limit for name in named) <= script.CALL_SECONDS, line
    assert all(step.limit <= script.CALL_SECONDS for step in script.STEPS.values())


def test_a_step_that_runs_out_is_stopped_with_what_it_started(tmp_path):
    """The step's child processes (pytest's workers) are killed with it: none outlives its time limit."""
    import os
    import sys
    import time

    marker = tmp_path / "grandchild.pid"
    child = ("import subprocess, sys, time; "
             f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
             f"open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    status, tail = _script().step("sleeper", [sys.executable, "-c", child], 3, tmp_path / "sleeper.log")
    assert status == "stopped at 3 s" and "started" in tail and "started" in (tmp_path / "sleeper.log").read_text()
    pid = int(marker.read_text())
    for _ in range(50):  # the kill is sent at once; the process table may take a moment
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the step's grandchild {pid} outlived it")


def test_prepare_saves_the_searches_run_reads(tmp_path, monkeypatch, capsys):
    import prism.workloads as wl

    monkeypatch.setattr(wl, "names", lambda: ["swiglu"])
    assert _script().prepare(str(tmp_path), 300.0) == 0
    saved = json.loads((tmp_path / "swiglu.json").read_text())
    assert saved and "saved" in capsys.readouterr().out


def test_run_without_a_gpu_or_searches_says_why_in_one_line(tmp_path, capsys):
    """On a CPU: no GPU. On a GPU: no searches in an empty folder. Either way nothing runs, exit 2."""
    assert _script().run(str(tmp_path), str(tmp_path / "out"), 16) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_run: ")


def test_run_refuses_an_unknown_step_in_one_line(tmp_path, capsys):
    """On a CPU the missing GPU is said first; on a GPU, the unknown step. Either way nothing runs, exit 2."""
    assert _script().run(str(tmp_path), str(tmp_path / "out"), 16, ["tests", "warp-drive"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_run: ")


def test_carried_packages_reach_the_steps(tmp_path):
    """`run --wheels`: what the folder holds (here a package as a .tgz, as transformers travels) is importable in
    every step, and nothing outside the step's own PYTHONPATH is touched."""
    import sys
    import tarfile

    package = tmp_path / "pkg" / "carried_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("WHERE = __file__\n")
    folder = tmp_path / "wheels"
    folder.mkdir()
    with tarfile.open(folder / "carried_probe.tgz", "w:gz") as tgz:
        tgz.add(package, "carried_probe")
    script = _script()
    site = script.install(str(folder))
    status, tail = script.step("probe", [sys.executable, "-c", "import carried_probe; print(carried_probe.WHERE)"], 60,
                               tmp_path / "probe.log", site)
    assert status == "ok" and tail.startswith(site), tail


def test_workloads_narrow_the_steps_that_measure_per_workload(tmp_path, monkeypatch):
    """`run --workloads` reaches gpu_bench and the oracle's collect, and no other step (the device is faked:
    every step is recorded, not run)."""
    import torch

    script = _script()
    (tmp_path / "rmsnorm.json").write_text("{}")
    ran = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "step", lambda name, argv, *rest: ran.setdefault(name, argv) and ("ok", ""))
    assert script.main(["run", "--search-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--steps",
                        "tests,gpu_bench,oracle", "--workloads", "rmsnorm,swiglu"]) == 0
    assert set(ran) == {"tests", "gpu_bench", "oracle"}
    for name in ("gpu_bench", "oracle"):
        assert ran[name][-2:] == ["--workloads", "rmsnorm,swiglu"]
    assert "--workloads" not in ran["tests"]


def test_after_gpu_bench_and_tvm_the_table_holds_tvms_columns(tmp_path, monkeypatch, capsys):
    """The steps' files are faked (no device): gpu_bench's rows and tvm_bench's, joined in the table printed last."""
    import torch

    from tests.tune.test_gpu_bench import FAKE

    script = _script()
    (tmp_path / "rmsnorm.json").write_text("{}")
    out = tmp_path / "out"
    tvm = {"rows": [{"workload": "rmsnorm", "config": {"n": 8, "d": 4096}, "tvm_us": 25.0, "tvm_graph_us": 21.75}]}

    def step(name, argv, *rest):
        files = {"gpu_bench": ("gpu_bench.json", FAKE), "tvm": ("tvm.json", tvm)}
        if name in files:
            (out / files[name][0]).write_text(json.dumps(files[name][1]))
        return "ok", ""

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(script, "step", step)
    monkeypatch.setattr(script, "TVM_BUILD", str(tmp_path))
    (tmp_path / "index.json").write_text("{}")
    script.main(["run", "--search-dir", str(tmp_path), "--out", str(out), "--steps", "gpu_bench,tvm"])
    printed = capsys.readouterr().out
    assert "TVM graph" in printed and "| 29.00 | 21.75 |" in printed


def test_compare_puts_each_configs_time_beside_an_earlier_runs(tmp_path, capsys):
    """`compare`: per config, Prism's CUDA-graph µs before and now, and the configs that moved by over 5% either way
    (the stored H200 run c against run a); a file that is not a run, or runs of different GPUs, are one line and
    exit 2."""
    results = ROOT / "benchmarks" / "results"
    now, before = results / "gpu_bench_h200_2026-11-27_c.json", results / "gpu_bench_h200_2026-11-27_a.json"
    assert _script().main(["compare", str(now), "--before", str(before)]) == 0
    out = capsys.readouterr().out
    assert "| rmsnorm | n=8,d=4096 | 17.45 | 21.13 | 0.83x | #25 grid(x=32, y=8) loop=4 warps=16 stages=1 |" in out
    assert out.strip().splitlines()[-3].startswith(
        "slower than before by over 5%: 3 (rmsnorm n=8,d=4096; rmsnorm_mlp n=8,d=1024; swiglu n=8,d=4096); faster: 3")
    # these runs tuned before a run kept the stored fastest form: none is judged against it
    assert out.strip().splitlines()[-1] == "slower than the fastest form stored for them beyond the run's own noise: 0"
    (tmp_path / "x.json").write_text("[]")
    assert _script().main(["compare", str(tmp_path / "x.json"), "--before", str(before)]) == 2
    h100 = results / "gpu_bench_h100_2026-11-26.json"
    assert _script().main(["compare", str(now), "--before", str(h100)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a gpu_bench run" in err[0] and "do not compare" in err[1]


def test_compare_fails_where_a_pick_is_slower_than_the_stored_fastest_beyond_the_runs_own_noise(tmp_path, capsys):
    """The H200 run c chose a 21.13 µs kernel for RMSNorm d=4096 where run a had measured a 17.45 µs split-K form.
    Had run c been told to keep that form and not timed it again, compare names the config and exits 1; had it
    timed it again at 22.00 µs (the same kernel slower in this process: the run's noise), the pick is within it."""
    results = ROOT / "benchmarks" / "results"
    run = json.loads((results / "gpu_bench_h200_2026-11-27_c.json").read_text())
    row = next(r for r in run["rows"] if r["workload"] == "rmsnorm" and r["config"] == {"n": 8, "d": 4096})
    chosen = row["report"]["entries"][row["report"]["chosen"]]["measured_us"]
    assert 20 < chosen < 22
    row["kept"] = {"label": "#25 grid(x=32, y=8) loop=4 warps=16 stages=1", "sgraph": "bc7090d601cd45ce",
                   "stored_us": 17.45, "now_us": None}
    path = tmp_path / "now.json"
    path.write_text(json.dumps(run))
    before = results / "gpu_bench_h200_2026-11-27_a.json"
    assert _script().main(["compare", str(path), "--before", str(before)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == "slower than the fastest form stored for them beyond the run's own noise: 1"
    assert lines[-1] == (f"- rmsnorm n=8,d=4096: chose {chosen:.2f} µs, the stored fastest #25 grid(x=32, y=8) loop=4 "
                         "warps=16 stages=1 measured 17.45 µs (not timed again)")
    row["kept"]["now_us"] = 22.0
    path.write_text(json.dumps(run))
    assert _script().main(["compare", str(path), "--before", str(before)]) == 0
    row["kept"]["now_us"] = chosen - 0.5     # timed again faster than the pick: the tuner would have chosen it
    path.write_text(json.dumps(run))
    assert _script().main(["compare", str(path), "--before", str(before)]) == 1
