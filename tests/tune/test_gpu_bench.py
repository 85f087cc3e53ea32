"""The GPU benchmark without a GPU: the script's arguments, the table of `prism.bench.gpu`, and the
script's clean refusal."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments(bench):
    args = bench.parse_args([])
    assert args.names == ["rmsnorm", "rmsnorm_mlp", "swiglu", "attention", "qk_attention", "lora",
                          "rmsnorm_linear", "gqa", "ntrans", "moe"]
    assert args.budget == 16 and args.out == "gpu_bench.json" and not args.no_compile
    assert args.compile_mode == "max-autotune-no-cudagraphs"
    args = bench.parse_args(["--workloads", "swiglu,attention", "--budget", "8", "--no-compile"])
    assert args.names == ["swiglu", "attention"] and args.budget == 8 and args.no_compile
    with pytest.raises(SystemExit):
        bench.parse_args(["--workloads", "nope"])


FAKE = {
    "device": "NVIDIA H100 80GB HBM3", "copy_gbps": 2900.0,
    "rows": [
        {"workload": "rmsnorm", "config": {"n": 8, "d": 4096}, "floor_us": 11.6, "prism_graph_us": 14.5,
         "compile_graph_us": 17.4, "eager_graph_us": 29.0, "prism_us": 20.0, "prism_ro_us": 18.0,
         "compile_us": 40.0, "eager_us": 30.0, "kernels": 1, "chosen": "#32 grid(x=1, y=64) loop=32",
         "report": {"space": {"points": 1200}}, "spearman": 0.8125, "superoptimize_s": 17.26},
        {"workload": "attention", "config": {"b": 2, "g": 8, "h": 8192, "d": 128}, "floor_us": 2.9,
         "prism_graph_us": 9.0, "prism_us": 12.0, "eager_graph_us": 45.0, "eager_us": 48.0, "compile_us": None,
         "kernels": 2, "chosen": "#13 grid(x=2, y=32) loop=8"},
        {"workload": "swiglu", "config": {"n": 8, "d": 1024}, "error": "search failed: boom"},
    ],
}


def test_table_from_a_fake_run():
    from prism.bench.gpu import COLUMNS, format_table

    text = format_table(FAKE)
    lines = text.splitlines()
    assert "NVIDIA H100 80GB HBM3" in lines[0] and "2900 GB/s" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + 3
    assert all(line.count("|") == len(COLUMNS) + 1 for line in table)
    assert table[2] == ("| rmsnorm | n=8,d=4096 | 11.60 | 14.50 | 17.40 | 29.00 | n/a | 20.00 | 18.00 | 40.00 | "
                        "30.00 | n/a | 5.50 | 80% | 1.20x | n/a | 1.50x | 1 | 1200 | +0.81 | 17.3 | "
                        "#32 grid(x=1, y=64) loop=32 |")
    assert "| 3.00 | 32% | n/a | n/a | 4.00x | 2 |" in table[3]   # compile missing: eager is the best torch
    assert table[4].endswith("| search failed: boom |") and table[4].count("n/a") >= 12


def test_tvms_figures_join_the_rows_of_the_same_workload_and_config():
    """`with_tvm` puts a tvm_bench run's figures beside the row of the same workload and config, and no other."""
    from prism.bench.gpu import format_table, with_tvm

    tvm = {"rows": [{"workload": "rmsnorm", "config": {"d": 4096, "n": 8}, "library": "x.so", "tvm_us": 25.0,
                     "tvm_graph_us": 21.75, "tvm_error": 0.03, "tvm_exact": False},
                    {"workload": "rmsnorm", "config": {"n": 8, "d": 1024}, "tvm_us": 1.0, "tvm_graph_us": 1.0}]}
    merged = with_tvm(FAKE, tvm)
    assert merged["rows"][0]["tvm_graph_us"] == 21.75 and "library" not in merged["rows"][0]
    assert not any(k.startswith("tvm_") for r in merged["rows"][1:] for k in r)
    assert "tvm_us" not in FAKE["rows"][0]                                   # the run itself is left as it was
    row = [line for line in format_table(merged).splitlines() if line.startswith("| rmsnorm")][0]
    assert "| 29.00 | 21.75 (wrong) | 20.00 |" in row and "| 30.00 | 25.00 (wrong) | 5.50 |" in row
    assert "| 1.20x | n/a | 1.50x |" in row       # off by 3%: TVM's time is shown, no ratio drawn from it
    right = with_tvm(FAKE, {"rows": [tvm["rows"][0] | {"tvm_error": 1e-3, "tvm_exact": True}]})
    row = [line for line in format_table(right).splitlines() if line.startswith("| rmsnorm")][0]
    assert "| 29.00 | 21.75 | 20.00 |" in row and "| 1.20x | 1.50x | 1.50x |" in row


def test_refuses_in_one_line_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run")
    done = subprocess.run([sys.executable, str(SCRIPT), "--workloads", "swiglu"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == ["gpu_bench: no CUDA GPU visible to torch; nothing measured"]


def test_the_calibration_script_fits_saves_and_refuses(tmp_path):
    """`fit` (on the CPU) reads collected samples, prints the held-out table and saves a calibration that
    loads; samples of another kind of GPU than `--kind`, and `collect` without a GPU, are refused in one line."""
    import torch

    from prism.tune.calibration import load
    from tests.tune.test_calibration import _samples
    from prism.tune.target import H100

    root = SCRIPT.parent
    samples = _samples(H100.with_(launch=5e-6))
    (tmp_path / "s.json").write_text(json.dumps({"device": "Fake GPU", "samples": [s.to_json() for s in samples]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(root / "tune_calibrate.py"), "fit", str(tmp_path / "s.json"),
                           "--save", str(tmp_path / "h100.json")], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert "| config | held-out points | Spearman, data sheet | Spearman, calibrated |" in done.stdout
    assert "| median |" in done.stdout and "saved" in done.stdout
    cal = load(tmp_path / "h100.json")
    assert cal.device == "Fake GPU" and cal.source["samples"] == len(samples)
    assert cal.values["launch"] == pytest.approx(5e-6, rel=0.3)
    other = subprocess.run([sys.executable, str(root / "tune_calibrate.py"), "fit", "--kind", "h200",
                            str(tmp_path / "s.json")], capture_output=True, text=True, timeout=300, env=env)
    assert other.returncode == 2 and other.stdout == ""          # an H200 calibration from another GPU's times
    assert other.stderr.strip().splitlines() == [f"tune_calibrate: {tmp_path / 's.json'}: measured on Fake GPU, "
                                                 "not on an H200"]
    if torch.cuda.is_available():
        return
    done = subprocess.run([sys.executable, str(root / "tune_calibrate.py"), "collect"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no CUDA GPU" in done.stderr


def test_a_saved_search_from_other_code_is_searched_again(tmp_path, monkeypatch):
    """The GPU benchmark reuses a saved search only if this build made it: an older one lacks the forms
    found since (a search saved before safe split-KV existed left attention's tuner with slow picks)."""
    import prism.workloads as wl
    from prism.bench.gpu import GPUOptions, search_result
    from prism.search import SearchResult

    program = wl.get("swiglu").build({"n": 4, "d": 64})
    calls: list[dict] = []

    def fake_search(graph, **limits):
        calls.append(limits)
        return SearchResult(graph, [], {"seconds": 0.0})

    monkeypatch.setattr(sys.modules["prism.search"], "search", fake_search)   # prism.search is also a function
    opts = GPUOptions(search_dir=str(tmp_path), search_time_limit=5.0)
    SearchResult(program, [], {"marker": "old"}, build="0.0.1+000000000000").save(tmp_path / "swiglu.json")
    said: list[str] = []
    again = search_result("swiglu", opts, said.append)
    assert len(calls) == 1 and not again.stale and "marker" not in again.stats
    assert "searched by Prism 0.0.1+000000000000" in said[0]
    assert not SearchResult.load(tmp_path / "swiglu.json").stale      # saved over the stale one
    assert search_result("swiglu", opts).stats == again.stats and len(calls) == 1   # now reused
