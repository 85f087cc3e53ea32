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


def test_its_steps_fit_one_device_call():
    assert sum(_script().LIMITS.values()) <= 600 - 60


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
