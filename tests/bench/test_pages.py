"""docs/benchmarks.md is what `python -m prism.bench.pages` writes from benchmarks/results: regenerated here and
compared byte for byte, so the page and the stored JSON cannot disagree; a figure changed in a JSON file changes
its row, so the comparison cannot pass on a page that ignores the files; and a result file no table reads is
listed, so a new one is not left off the page unseen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from prism.bench.pages import write_benchmarks_page

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
RUN = "gpu_bench_h200_2026-11-27_c.json"


def summary_row(text: str, workload: str, config: str) -> str:
    """The summary table's row of one config (the first table on the page)."""
    return next(line for line in text.splitlines() if line.startswith(f"| NVIDIA H200 | 2026-11-27 | {workload} | "
                                                                          f"{config} |"))


def test_the_committed_page_is_what_the_stored_results_give(tmp_path):
    out = write_benchmarks_page(RESULTS, tmp_path / "benchmarks.md")
    assert out.read_bytes() == (ROOT / "docs" / "benchmarks.md").read_bytes(), (
        "docs/benchmarks.md is out of date: run `python -m prism.bench.pages` and commit the page")


def test_a_changed_figure_changes_its_row(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    run = json.loads((results / RUN).read_text())
    row = next(r for r in run["rows"] if r["workload"] == "swiglu" and r["config"] == {"n": 8, "d": 1024})
    before = summary_row(write_benchmarks_page(results, tmp_path / "before.md").read_text(), "swiglu", "n=8,d=1024")
    row["prism_graph_us"] = row["eager_graph_us"] / 4           # a kernel 4x faster than eager's
    (results / RUN).write_text(json.dumps(run))
    after = summary_row(write_benchmarks_page(results, tmp_path / "after.md").read_text(), "swiglu", "n=8,d=1024")
    assert before != after
    assert f"| {row['prism_graph_us']:.2f} | 4.00x |" in after


def test_a_stored_result_no_table_reads_is_listed(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    (results / "new_run.json").write_text("{}")
    text = write_benchmarks_page(results, tmp_path / "page.md").read_text()
    assert "## Stored results without a table here\n\n[`new_run.json`]" in text


def test_the_families_table_shows_the_decode_steps_launches():
    """The last graph's launches (the decode step's): Prism's kernels + torch's ops; blank where a run has none."""
    from prism.bench.pages import families_table

    step = {"prism": 11, "prism_later": 0, "rest": 7, "total": 18, "rest_kernels": [], "how": ""}
    row = {"family": "llama", "status": "match", "error": 1e-7, "graphs": 2, "fused": 22, "left": [], "seconds": 5}
    table = families_table([row | {"launches": [{"prism": 1, "rest": 0}, step]}, row | {"family": "old"}])
    assert "| llama | match | 1.0e-07 | 2 | 22 | 0 | 0 | 11 + 7 | 5 |" in table
    assert "| old | match | 1.0e-07 | 2 | 22 | 0 | 0 |  | 5 |" in table
