"""prism.bench: the report from the real measurements, one tiny resumable run, its errors, the GPU table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import prism.workloads as wl
from prism.bench import GPUUnavailable, load_results, run, write_report
from prism.bench.gpu import COLUMNS, format_table
from prism.bench.paper_report import markdown
from prism.bench.paper_search import Plan, Run, config_text
from prism.errors import InputError, PrismError

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "benchmarks" / "results" / "results.json"
PNG = b"\x89PNG\r\n\x1a\n"


def rows(md: str, section: str) -> dict[str, list[str]]:
    """The body rows of the first markdown table after the heading `section`, by first cell."""
    text = md.split(section, 1)[1]
    table = [line for line in text.split("\n\n", 3)[2].splitlines() if line.startswith("|")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table[2:])}


def ours(rec: dict | None, unit: str) -> str:
    """What our cell must say: a time-limited search carries 'x' (seconds) or '*' (graphs), never a plain number."""
    if rec is None:
        return "-"
    if unit == "s":
        return f"{rec['seconds']:.0f}x" if rec["timed_out"] else f"{rec['seconds']:.1f}"
    return f"{rec['graphs']}*" if rec["timed_out"] else str(rec["graphs"])


def is_png(path: Path) -> bool:
    from matplotlib.image import imread

    data = path.read_bytes()
    return data.startswith(PNG) and len(data) > 10_000 and imread(path).shape[0] > 300


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    results = json.loads(REAL.read_text())
    out = tmp_path_factory.mktemp("real")
    return results["records"], out, write_report(results, out)


def test_report_from_the_real_records(real_report):
    records, out, files = real_report
    assert [f.name for f in files] == ["report.md", "search_time.png", "unique_graphs.png", "ablation.png"]
    assert all(is_png(f) for f in files[1:])
    md = files[0].read_text()
    plan = Plan()
    times, graphs = rows(md, "## Search time"), rows(md, "## Unique graphs")
    paper = {"RMSNorm": (["11.6", "13.0", "0.3"], ["1", "8", "9"]),
             "RMSNorm-MLP": (["3600x", "3600x", "871"], ["12", "14", "23"]),
             "SwiGLU": (["45.6", "27.0", "1.0"], ["1", "1", "12"]),
             "Attention": (["42.4", "10.0", "41"], ["4", "3", "14"]),
             "QK-Attention": (["154.5", "10.1", "42"], ["4", "4", "14"])}
    for name, label in zip(wl.names(), paper):
        recs = [records.get(r.key) for r in plan.concrete(name) + [plan.symbolic(name)]]
        assert times[label] == paper[label][0] + [ours(r, "s") for r in recs]
        assert graphs[label] == paper[label][1] + [ours(r, "graphs") for r in recs]
    ablation = rows(md, "## Ablation")
    assert list(ablation) == ["S S S", "S S C", "S C S", "C S S", "S C C", "C S C", "C C C"]
    for run_, paper_s in zip(plan.ablations(), ["0.3", "2.5", "5.5", "20.5", "5.5", "22.5", "312"]):
        rec = records[run_.key]
        assert ablation[" ".join(run_.modes)] == [paper_s, ours(rec, "s"), str(rec["states"]),
                                                  str(rec["structures"]), ours(rec, "graphs")]
    cut = [r for r in records.values() if r["timed_out"]]
    assert cut, "the real Mirage-style runs hit their limit"
    assert "x" in "".join(c for row in times.values() for c in row[3:])
    assert "*" in "".join(c for row in graphs.values() for c in row[3:])
    assert "Machine: AMD EPYC, 2 cores" in md and "## GPU" not in md and not (out / "kernel_time.png").exists()


def test_prism_bench_rewrites_the_report_from_saved_results(tmp_path, capsys):
    from prism.cli import main

    (tmp_path / "out").mkdir()
    shutil.copy(REAL, tmp_path / "out" / "results.json")
    assert main(["bench", "--out", str(tmp_path / "out"), "--report-only"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# Prism benchmark report") and "| RMSNorm-MLP | 3600x | 3600x | 871 |" in printed
    assert (tmp_path / "out" / "search_time.png").exists()
    assert main(["bench", "--out", str(tmp_path / "none"), "--report-only"]) == 2
    assert "cannot read benchmark results" in capsys.readouterr().err


def test_a_tiny_run_and_its_resumption(tmp_path, monkeypatch):
    import prism.bench.generality as generality
    from prism.search import SearchResult

    monkeypatch.setattr(generality, "CHOICE_BUDGET", 2)   # two compiled candidates: seconds, not a minute
    out = tmp_path / "out"
    lines: list[str] = []
    opts = dict(workloads=["swiglu"], mirage=False, ablation=False, workers=1, gpu=False, progress=lines.append)
    first = run(out, **opts)
    assert [line.split(" (")[0] for line in lines[:1]] == ["search swiglu SSS n=8,d=1024"]
    assert len(lines) == 4 and lines[1].startswith("swiglu SSS n=8,d=1024: ") and "0 unsound" in lines[1]
    assert lines[2].startswith("choice swiglu n=8,d=1024 (cost model, budget 2)") and "check ok" in lines[3]
    key = Run("swiglu", wl.get("swiglu").configs[0], "SSS", 3600.0).key
    saved = load_results(out / "results.json")
    assert list(saved["records"]) == [key] and saved["records"][key]["graphs"] > 0
    assert saved["plan"]["workloads"] == ["swiglu"] and saved["machine"]["cores"] >= 1
    assert len(SearchResult.load(out / "searches" / "swiglu.json")) == saved["records"][key]["graphs"]
    choice = saved["choices"]["swiglu"]
    assert choice["check_ok"] and choice["relative_error"] < 2e-2 and choice["method"] == "cost-model"
    assert choice["chosen"].startswith("#") and choice["kernels"] >= 1     # a fused kernel beats the unfused one
    assert choice["estimate_us"] < choice["unfused_us"]
    assert {f.name for f in first["files"]} >= {"results.json", "report.md", "search_time.png"}
    assert is_png(out / "search_time.png") and not (out / "ablation.png").exists()
    md = (out / "report.md").read_text()
    assert "prism.bench.run(" in md and rows(md, "## Search time")["SwiGLU"][3:5] == ["-", "-"]
    row = rows(md, "## Generality")["SwiGLU"]
    assert row[:5] == ["n=8,d=1024", ours(saved["records"][key], "s"), ours(saved["records"][key], "graphs"),
                       choice["chosen"], str(choice["kernels"])]
    assert row[5].startswith("cost model: est.") and row[6].startswith("ok (") and row[7:] == ["-"] * 4

    lines.clear()
    second = run(out, **opts)
    assert lines == ["1 of 1 searches already measured; 0 to go"]
    assert second["records"] == first["records"] and second["choices"] == first["choices"]


def test_generality_rows_prefer_the_measured_gpu_choice():
    """A GPU row of the first config replaces the cost model's choice and fills the time columns; an error row
    says why; a workload measured nowhere is all '-' but its search."""
    from prism.bench.generality import GENERALITY_COLUMNS, generality_rows
    from tests.tune.test_gpu_bench import FAKE as GPU

    plan = Plan(workloads=("rmsnorm", "attention", "swiglu", "lora"))
    records = {plan.symbolic("rmsnorm").key: {"seconds": 0.31, "graphs": 9, "timed_out": False}}
    choices = {"rmsnorm": {"chosen": "#1 model's", "kernels": 1, "estimate_us": 20.0, "unfused_us": 50.0,
                           "check_ok": True, "relative_error": 1e-3}}
    gpu = {**GPU, "rows": [{**GPU["rows"][0], "prism_error": 3e-3}, *GPU["rows"][1:]]}
    got = {r[0]: r[1:] for r in generality_rows(plan, records, choices, gpu)}
    assert all(len(r) + 1 == len(GENERALITY_COLUMNS) for r in got.values())
    assert got["RMSNorm"] == ["n=8,d=4096", "0.3", "9", "#32 grid(x=1, y=64) loop=32", "1", "GPU timing", "ok (3e-03)",
                              "14.5", "29.0", "17.4", "1.20x"]
    assert got["Attention"][3:] == ["#13 grid(x=2, y=32) loop=8", "2", "GPU timing", "n/a", "9.0", "45.0", "n/a",
                                    "n/a"]
    assert got["SwiGLU"][3:7] == ["search failed: boom", "-", "-", "-"]
    assert got["LoRA"] == [config_text(wl.get("lora").configs[0])] + ["-"] * 10


def test_errors_are_input_errors_before_anything_is_written(tmp_path):
    with pytest.raises(InputError, match="unknown workload.*'nope'.*known workloads: rmsnorm, rmsnorm_mlp"):
        run(tmp_path / "a", workloads=["swiglu", "nope"], gpu=False)
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file"):
        run(tmp_path / "file", workloads=["swiglu"], gpu=False)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="cannot read"):
        load_results(tmp_path / "bad.json")


def test_gpu_true_without_a_gpu_refuses_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(GPUUnavailable) as caught:
        run(tmp_path / "g", workloads=["swiglu"], gpu=True)
    assert isinstance(caught.value, PrismError)
    assert str(caught.value) == "no CUDA GPU visible to torch; nothing measured"
    assert not (tmp_path / "g").exists()


def test_gpu_table_and_plot_from_hand_made_rows(real_report, tmp_path):
    """The report holds the GPU table (its cells are pinned in tests/tune/test_gpu_bench.py) and its plot."""
    from tests.tune.test_gpu_bench import FAKE as GPU

    table = [line for line in format_table(GPU).splitlines() if line.startswith("|")]
    assert len(table) == 2 + 3 and all(line.count("|") == len(COLUMNS) + 1 for line in table)
    records = real_report[0]
    results = {"records": records, "gpu": GPU, "machine": {"cpu": "Test CPU", "cores": 3}, "date": "2026-01-02",
               "command": "python x.py"}
    md = markdown(results)
    assert "## GPU kernel times" in md and table[2] in md and "Test CPU, 3 cores" in md and "2026-01-02" in md
    files = write_report(results, tmp_path)
    assert files[-1].name == "kernel_time.png" and is_png(files[-1])
