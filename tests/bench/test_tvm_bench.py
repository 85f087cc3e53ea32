"""benchmarks/tvm_bench.py: TVM's column (the paper's third baseline), built where the optional extra is installed."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("tvm_bench", ROOT / "benchmarks" / "tvm_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_tvm_it_says_how_to_install_it_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tvm", None)        # import tvm raises ImportError
    assert _script().main(["check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install -e '.[tvm]'" in err[0]


def test_an_unknown_workload_is_refused_by_name(capsys):
    pytest.importorskip("tvm", reason="apache-tvm is the optional extra '.[tvm]': TVM's column is built where it is")
    assert _script().main(["check", "--workloads", "rmsnorm,nope"]) == 2
    assert "no workload nope" in capsys.readouterr().err


def test_tvm_computes_each_formula_and_a_wrong_one_fails_the_check(monkeypatch):
    """TVM's build of a workload's torch formula matches its reference on the CPU; a formula that computes
    something else (twice the output) is caught by the same check."""
    pytest.importorskip("tvm", reason="apache-tvm is the optional extra '.[tvm]': TVM's column is built where it is")
    from prism import workloads as wl

    script = _script()
    for name in ("rmsnorm", "attention"):
        assert script.check_one(name, wl.get(name).small_config)["ok"], name
    w = wl.get("rmsnorm")
    doubled = replace(w, reference_fn=lambda *xs, f=w.reference_fn: 2 * f(*xs))
    monkeypatch.setattr(wl, "get", lambda name: doubled)
    wrong = script.relax_module("rmsnorm", w.small_config)
    monkeypatch.undo()
    monkeypatch.setattr(script, "relax_module", lambda name, cfg: wrong)
    assert not script.check_one("rmsnorm", w.small_config)["ok"]


def test_prepare_builds_a_library_per_config_for_sm90(tmp_path):
    pytest.importorskip("tvm", reason="apache-tvm is the optional extra '.[tvm]': TVM's column is built where it is")
    import json

    assert _script().main(["prepare", "--out", str(tmp_path), "--workloads", "swiglu"]) == 0
    index = json.loads((tmp_path / "index.json").read_text())
    assert len(index["rows"]) == 2 and all((tmp_path / r["library"]).stat().st_size > 0 for r in index["rows"])
    assert all(r["target"]["arch"] == "sm_90" for r in index["rows"])
