"""The benchmark report: markdown tables beside the paper's numbers, and PNG plots of the same figures.

Everything is rebuilt from the saved results (records, plan, machine, GPU rows), so a report can be
rewritten without measuring. A search stopped by its time limit is never shown as a plain number: its
seconds carry an 'x' and its graph count a '*' (as in the paper), and its bars are hatched.
"""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Any, Callable, NamedTuple

import prism.workloads as wl
from prism.bench.generality import GENERALITY_COLUMNS, generality_rows
from prism.bench.gpu import format_table
from prism.bench.paper_search import (NAMES, NO_FIGURE, PAPER_ABLATION, PAPER_GRAPHS, PAPER_THREADS, PAPER_TIME,
                                      Plan, Run, config_text, graphs_text, seconds_text)

__all__ = ["machine", "markdown", "markdown_table", "write_report"]

NOT_RECORDED = "not recorded"


class Kind(NamedTuple):
    """One kind of search figure, the paper's beside ours: table column / legend labels, bar colours."""

    paper: str
    ours: str
    light: str  # the paper's bars
    dark: str  # ours


KINDS = [Kind("paper Mirage c1", "ours Mirage-style c1", "#c6dbef", "#3182bd"),
         Kind("paper Mirage c2", "ours Mirage-style c2", "#dadaeb", "#6a51a3"),
         Kind("paper Prism", "ours Prism", "#fdd0a2", "#e6550d")]
"""The columns of the search tables and the bars of each plot group, in the paper's order."""


def machine() -> dict[str, Any]:
    """This machine as the report states it: CPU model (from /proc/cpuinfo where there is one), cores."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


# ---- the tables ----------------------------------------------------------------------------------

def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table of `rows` (cells given as values, written with str) under `header`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _ours(records: dict[str, dict[str, Any]], runs: list[Run], n: int) -> list[dict[str, Any] | None]:
    """The records of `runs` padded to `n` (None: not measured)."""
    return ([records.get(r.key) for r in runs] + [None] * n)[:n]


def _by_workload(plan: Plan, records: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any] | None]]:
    """Per workload: our Mirage-style records at c1 and c2, then our Prism record."""
    return {n: _ours(records, plan.concrete(n), 2) + [records.get(plan.symbolic(n).key)] for n in plan.workloads}


def _text(rec: dict[str, Any] | None, fmt: Callable[[dict[str, Any]], str]) -> str:
    return "-" if rec is None else fmt(rec)


def _header(results: dict[str, Any], plan: Plan, used: list[dict[str, Any]]) -> list[str]:
    host = results.get("machine") or {}
    workers = sorted({r["workers"] for r in used if "workers" in r})
    return [
        "# Prism benchmark report",
        "",
        f"- Date: {results.get('date', NOT_RECORDED)}",
        "- Machine: " + (f"{host['cpu']}, {host['cores']} cores" if host else NOT_RECORDED)
        + (f", {'/'.join(map(str, workers))} worker processes" if workers else "")
        + f" (the paper: {PAPER_THREADS} threads)",
        f"- Command: `{results.get('command', NOT_RECORDED)}`",
        f"- Time limits: Prism {plan.time_limit:.0f} s per workload"
        + (f", Mirage-style {plan.mirage_limit:.0f} s per config" if plan.mirage else "")
        + (f", ablation {plan.ablation_limit:.0f} s per search" if plan.ablation else ""),
        "",
        "Every search uses the default limits, the real verifier (`prism.verify.equivalent`) and the numeric "
        "cross-check. Prism searches once per workload, at c1's shapes (its maps are symbolic in the sizes); "
        "the Mirage-style mode enumerates maps, grid sizes and loop ranges during the search, once per "
        "config. c1 / c2: " + "; ".join(f"{NAMES[n]} {' / '.join(config_text(c) for c in wl.get(n).configs)}"
                                         for n in plan.workloads) + ".",
    ]


def _search_tables(plan: Plan, records: dict[str, dict[str, Any]]) -> list[str]:
    ours = _by_workload(plan, records)
    head = ["workload"] + [k.paper for k in KINDS] + [k.ours for k in KINDS]
    times = [[NAMES[n], *PAPER_TIME.get(n, NO_FIGURE), *(_text(r, seconds_text) for r in ours[n])]
             for n in plan.workloads]
    graphs = [[NAMES[n], *PAPER_GRAPHS.get(n, NO_FIGURE), *(_text(r, graphs_text) for r in ours[n])]
              for n in plan.workloads]
    return ["## Search time (paper §7.3, seconds)", "",
            "'x': stopped at the time limit after that many seconds (the search had not finished); "
            "'-': not measured.", "", markdown_table(head, times), "", "![search time](search_time.png)", "",
            "## Unique graphs (paper §7.4: structure + maps; sizes do not count)", "",
            "'*': found before the time limit stopped the search (a lower bound); '-': not measured.", "",
            markdown_table(head, graphs), "", "![unique graphs](unique_graphs.png)"]


def _generality_table(plan: Plan, records: dict[str, dict[str, Any]], results: dict[str, Any]) -> list[str]:
    rows = generality_rows(plan, records, results.get("choices") or {}, results.get("gpu"))
    return ["## Generality: every program end to end", "",
            "Per program: Prism's symbolic search (as above), the kernel superoptimize chooses at the first config "
            "from it, and that kernel against the torch reference on random inputs (relative error, bound 2e-2). "
            "Without a GPU the cost model chooses (candidates compiled for sm_90) and the reference executor runs "
            "the choice; with one, the GPU benchmark's measured choice and its CUDA-graph times are shown. "
            "'-': not measured.", "",
            markdown_table(GENERALITY_COLUMNS, rows)]


def _ablation_table(plan: Plan, records: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for run in plan.ablations():
        rec = records.get(run.key)
        counts = ["-" if rec is None else rec[k] for k in ("states", "structures")]
        rows.append([" ".join(run.modes), PAPER_ABLATION[run.modes], _text(rec, seconds_text), *counts,
                     _text(rec, graphs_text)])
    return [f"## Ablation (paper §7.5): RMSNorm {config_text(plan.ablations()[0].cfg)}, search seconds", "",
            "imap / fmap / omap each symbolic (S) or enumerated during generation (C). "
            "'x' / '*': stopped at the time limit.", "",
            markdown_table(["imap fmap omap", "paper s", "ours s", "states", "structures", "graphs"], rows), "",
            "![ablation](ablation.png)"]


def markdown(results: dict[str, Any]) -> str:
    """The report's text: the machine, date and command, then each table beside the paper's numbers."""
    plan = Plan(**results.get("plan", {}))
    records = results["records"]
    used = [r for r in (records.get(run.key) for run in plan.runs()) if r is not None]
    sections = [_header(results, plan, used), _search_tables(plan, records)]
    if plan.generality:
        sections.append(_generality_table(plan, records, results))
    if plan.ablation:
        sections.append(_ablation_table(plan, records))
    if _has_gpu_rows(results):
        sections.append(["## GPU kernel times (µs)", "", format_table(results["gpu"]), "",
                         "![kernel time](kernel_time.png)"])
    sections.append(["## Totals", "",
                     f"- Searches measured: {len(used)} of {len(plan.runs())}; "
                     f"stopped at their time limit: {sum(r['timed_out'] for r in used)}",
                     "- Unsound-axiom events (a verified candidate failing the numeric cross-check): "
                     f"{sum(r['unsound'] for r in used)}"])
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"


def _has_gpu_rows(results: dict[str, Any]) -> bool:
    return bool((results.get("gpu") or {}).get("rows"))


# ---- the plots -----------------------------------------------------------------------------------

class Series(NamedTuple):
    """One bar per group: its value (None: not measured), its label text, whether a time limit cut it."""

    label: str
    values: list[float | None]
    texts: list[str]
    cut: list[bool]
    color: str
    paper: bool = False


def _series(label: str, color: str, recs: list[dict[str, Any] | None], key: str,
            fmt: Callable[[dict[str, Any]], str]) -> Series:
    return Series(label, [None if r is None else r[key] for r in recs], [_text(r, fmt) for r in recs],
                  [r is not None and r["timed_out"] for r in recs], color)


def _paper(label: str, color: str, printed: list[Any]) -> Series:
    """The paper's figures as it prints them ('3600x': stopped at its time limit; '-': none, no bar)."""
    return Series(label, [math.nan if p == "-" else float(str(p).rstrip("x")) for p in printed],
                  [str(p) for p in printed],
                  [str(p).endswith("x") for p in printed], color, paper=True)


def _edge(s: Series) -> str:
    return "0.25" if s.paper else s.color


def _bars(path: Path, groups: list[str], series: list[Series], *, title: str, ylabel: str, scale: str,
          note: str, xlabel: str = "") -> Path:
    """Grouped bars, one group per entry of `groups`, each bar labelled with its table text; bars cut
    by a time limit are hatched, bars never measured say 'n/a' on the axis. Written to `path`."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(max(7.0, 1.0 + 0.32 * len(groups) * len(series)), 5.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.84 / len(series)
    for i, s in enumerate(series):
        for g, (v, text, cut) in enumerate(zip(s.values, s.texts, s.cut)):
            x = g + (i - (len(series) - 1) / 2) * width
            if v is None:
                ax.text(x, 0.01, "n/a", transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                        rotation=90, fontsize=7, color="0.4")
                continue
            ax.bar(x, v, width, color=s.color, edgecolor=_edge(s), linewidth=0.6, hatch="////" if cut else None,
                   hatchcolor="0.25" if s.paper else "white")
            ax.annotate(text, (x, v), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        rotation=90, fontsize=7.5, fontweight="bold" if cut else "normal")
    tops = [v for s in series for v in s.values if v and math.isfinite(v)] or [1.0]  # '-': nan, no bar
    if scale == "log":
        ax.set_yscale("log")
        ax.set_ylim(min(tops) / 2, max(tops) * 12)
    else:  # counts: symlog shows a zero and spans 1 to hundreds
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, max(tops) * 12)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.set_axisbelow(True)
    handles = [Patch(facecolor=s.color, edgecolor=_edge(s)) for s in series]
    labels = [s.label for s in series]
    if any(c for s in series for c in s.cut):
        handles.append(Patch(facecolor="white", edgecolor="0.25", hatch="////"))
        labels.append(note)
    ax.legend(handles, labels, fontsize=8, ncols=min(4, len(labels)), loc="upper left", frameon=False)
    fig.savefig(path, dpi=120)
    return path


def _search_plots(plan: Plan, records: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    ours = _by_workload(plan, records)
    groups = [NAMES[n] for n in plan.workloads]
    limits = "hatched / x: stopped at the time limit"
    time_series, graph_series = [], []
    for k, (paper, mine, light, dark) in enumerate(KINDS):
        recs = [ours[n][k] for n in plan.workloads]
        time_series += [_paper(paper, light, [PAPER_TIME.get(n, NO_FIGURE)[k] for n in plan.workloads]),
                        _series(mine, dark, recs, "seconds", seconds_text)]
        graph_series += [_paper(paper, light, [PAPER_GRAPHS.get(n, NO_FIGURE)[k] for n in plan.workloads]),
                         _series(mine, dark, recs, "graphs", graphs_text)]
    files = [_bars(out / "search_time.png", groups, time_series, title="Search time per workload (paper §7.3)",
                   ylabel="seconds (log scale)", scale="log", note=limits),
             _bars(out / "unique_graphs.png", groups, graph_series, title="Unique graphs per workload (paper §7.4)",
                   ylabel="graphs (symlog scale)", scale="symlog", note="hatched / *: found before the time limit")]
    runs = plan.ablations()
    if runs:
        recs = [records.get(r.key) for r in runs]
        files.append(_bars(out / "ablation.png", [" ".join(r.modes) for r in runs],
                           [_paper("paper", KINDS[-1].light, [PAPER_ABLATION[r.modes] for r in runs]),
                            _series("ours", KINDS[-1].dark, recs, "seconds", seconds_text)],
                           title=f"Ablation on RMSNorm {config_text(runs[0].cfg)} (paper §7.5)",
                           xlabel="imap fmap omap: S symbolic, C enumerated during generation",
                           ylabel="seconds (log scale)", scale="log", note=limits))
    return files


def _kernel_plot(gpu: dict[str, Any], out: Path) -> Path:
    rows = gpu["rows"]
    series = []
    for label, key, color in [("Prism (graph)", "prism_graph_us", "#e6550d"), ("Prism (called)", "prism_us", "#fdae6b"),
                              ("torch.compile (graph)", "compile_graph_us", "#31a354"),
                              ("torch eager (graph)", "eager_graph_us", "#3182bd"), ("DRAM floor", "floor_us", "#969696")]:
        values = [r.get(key) for r in rows]
        series.append(Series(label, values, ["-" if v is None else f"{v:.1f}" for v in values],
                             [False] * len(rows), color))
    groups = []
    for r in rows:  # sizes two to a line, so ten groups' labels fit side by side
        sizes = [f"{k}={v}" for k, v in r["config"].items()]
        groups.append("\n".join([NAMES[r["workload"]]] + [" ".join(sizes[i:i + 2]) for i in range(0, len(sizes), 2)]))
    return _bars(out / "kernel_time.png", groups, series, title=f"Kernel time per config on {gpu.get('device', '?')}",
                 ylabel="µs (log scale)", scale="log", note="")


def write_report(results: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write report.md and its PNGs into `out_dir` from saved `results` (as run() saves them in
    results.json: records by run key, and where recorded the plan, machine, date, command and GPU rows;
    a missing plan means the default one). Measures nothing. Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(**results.get("plan", {}))
    files = _search_plots(plan, results["records"], out)
    if _has_gpu_rows(results):
        files.append(_kernel_plot(results["gpu"], out))
    report = out / "report.md"
    report.write_text(markdown(results))
    return [report] + files
