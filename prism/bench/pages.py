"""The benchmarks page, docs/benchmarks.md, written from the stored results alone.

A figure a person copies into a page drifts from the run it came from; here every measured figure on the page is
read from a JSON file under benchmarks/results/ and formatted by code, and tests/bench/test_pages.py regenerates the
page and fails where it differs from the committed one, so the page cannot state what no stored run holds. What
a result file does not record itself (the command that wrote it, what a before/after run compared) is kept in
this module beside the file's name; where that command is not known the page says "command not recorded".

    python -m prism.bench.pages [RESULTS_DIR OUT]    (default: benchmarks/results -> docs/benchmarks.md)

A JSON file under the results folder that no table reads is listed at the page's end, so a new result shows up
there until a table renders it.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, NamedTuple

from prism.bench.gpu import SLOWER, against, format_table, num_text, ratio, with_tvm
from prism.bench.paper_report import markdown, markdown_table
from prism.bench.paper_search import config_text

__all__ = ["NORM_OPS", "NOT_RECORDED", "families_table", "first_compile_table", "frames_text", "page",
           "write_benchmarks_page"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "benchmarks/results"
"""How the page names the results folder, whichever folder it was written from (the page is the same text)."""
LINK = "../" + RESULTS
"""The results folder as seen from docs/, for links."""
NOT_RECORDED = "command not recorded"
TVM_PREPARE = "python benchmarks/tvm_bench.py prepare --out tvm-build"
"""On a CPU, before a GPU call with the tvm step: TVM's libraries for sm_90 and its runtime, carried."""


# ---- what the files do not record ---------------------------------------------------------------

class GPURun(NamedTuple):
    """A gpu_bench run kept under the results folder: its file, the commands that made it, the folder of the
    search results it tuned (kept, so that its timed candidates can be rebuilt as oracle samples), and a
    tvm_bench run of the same tree and machine whose columns join its table."""

    file: str
    commands: tuple[str, ...]
    searches: str | None = None
    tvm: str | None = None


GPU_CALL_H200 = "python3 benchmarks/gpu_run.py run --search-dir gpu-searches --out $OUT"
PROVENANCE = json.loads((ROOT / RESULTS / "provenance.json").read_text())
"""What the result files do not record themselves (which command made each, what was compared), kept beside
them in benchmarks/results/provenance.json: the names of dated runs are data, not code."""
GPU_RUNS = [GPURun(r["file"], tuple(r["commands"]), r.get("searches"), r.get("tvm")) for r in PROVENANCE["gpu_runs"]]
"""Every gpu_bench run kept, with what made it. TVM's run joins the two calls of its tree (its step ran in the
first and measured every config)."""
COMPARE_BEFORE, COMPARE_NOW = (tuple(PROVENANCE["compare"][k]) for k in ("before", "now"))
"""The H200 runs `gpu_run.py compare` set side by side: the later tree's two calls against the earlier's."""


def _searches_of(run: str) -> str | None:
    """The folder of saved searches gpu_bench run `run` tuned (provenance.json)."""
    return next(r.searches for r in GPU_RUNS if r.file == run)


class Table(NamedTuple):
    """A section of the page: its title, the files it reads (under the results folder), the commands that wrote
    them (empty: not recorded), what was compared (words, no figures), and how the files become markdown."""

    title: str
    files: tuple[str, ...]
    commands: tuple[str, ...] | None  # None: each file's, in the table
    note: str
    render: Callable[[list[Any]], str]


# ---- formatting ----------------------------------------------------------------------------------

def _link(name: str) -> str:
    return f"[`{name}`]({LINK}/{name})"


def _name(r: dict[str, Any]) -> str:
    """A before/after record's job: newer runs say `job`, older ones `workload`."""
    return r.get("job") or r["workload"]


def _jobs(records: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(_name(r) for r in records))


def _sides(records: list[dict[str, Any]], name: str) -> dict[str, list[dict[str, Any]]]:
    return {s: [r for r in records if _name(r) == name and r["side"] == s] for s in ("before", "after")}


def _runs(records: list[dict[str, Any]]) -> int:
    return max(r["run"] for r in records) + 1


# ---- the summary ---------------------------------------------------------------------------------

def _joined(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every gpu_bench run (file, document) with its TVM run's columns joined, oldest first."""
    runs = []
    for run in GPU_RUNS:
        doc = _read(results, run.file)
        if run.tvm:
            doc = with_tvm(doc, _read(results, run.tvm))
        runs.append((run.file, doc))
    return sorted(runs, key=lambda fd: fd[1]["started"])


def _vs(r: dict[str, Any], key: str) -> float | None:
    return ratio(r.get(key), r.get("prism_graph_us"))


SUMMARY_NOTE = (
    "Prism's chosen kernel per workload config, in a CUDA-graph replay (device time, µs), against torch eager, "
    "Inductor (`torch.compile` of the torch formula, in the mode each run's table names) and TVM: the other side's "
    "time over Prism's, so above 1x Prism is faster. 'of DRAM floor': the time a kernel moving each input and output "
    "once at the measured copy bandwidth would take, over Prism's. Where several runs of one GPU kind on one date "
    "measured a config, the latest is shown; 'run' names it. 'wrong output': TVM's result missed the float32 "
    "reference, so no ratio. Geometric means over the configs with a figure (how many in brackets).")


def _summary(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Per GPU kind and date: each config's Prism CUDA-graph time, the other sides' over it, the DRAM floor over
    it, from the latest run of that date that measured the config; then each group's geometric means."""
    groups: dict[tuple[str, str], dict[str, tuple[str, dict[str, Any]]]] = defaultdict(dict)
    for file, doc in runs:       # oldest first: a later run's row of a config replaces an earlier one's
        for r in doc["rows"]:
            key = json.dumps([r["workload"], r["config"]])
            groups[(doc["started"][:10], doc["device"])][key] = (file, r)
    head = ["GPU", "date", "workload", "config", "Prism µs", "vs eager", "vs Inductor", "vs TVM", "of DRAM floor",
            "run"]
    rows = []
    for (date, device), found in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1]), reverse=True):
        ratios: dict[str, list[float]] = defaultdict(list)
        for file, r in found.values():
            wrong = r.get("tvm_exact") is False
            cells = {"eager": _vs(r, "eager_graph_us"), "Inductor": _vs(r, "compile_graph_us"),
                     "TVM": None if wrong else _vs(r, "tvm_graph_us"),
                     "floor": ratio(r.get("floor_us"), r.get("prism_graph_us"))}
            for k, v in cells.items():
                if v is not None:
                    ratios[k].append(v)
            tvm = "wrong output" if wrong else num_text(cells["TVM"], "{:.2f}x")
            rows.append([device, date, r["workload"], config_text(r["config"]), num_text(r.get("prism_graph_us")),
                         num_text(cells["eager"], "{:.2f}x"), num_text(cells["Inductor"], "{:.2f}x"), tvm,
                         num_text(cells["floor"], "{:.0%}"), f"[{Path(file).stem}]({LINK}/{file})"])

        def mean(k: str, fmt: str) -> str:
            return "n/a" if not ratios[k] else f"{num_text(statistics.geometric_mean(ratios[k]), fmt)} ({len(ratios[k])})"

        rows.append([device, date, "**geometric mean**", f"{len(found)} configs", "", mean("eager", "{:.2f}x"),
                     mean("Inductor", "{:.2f}x"), mean("TVM", "{:.2f}x"), mean("floor", "{:.0%}"), ""])
    return markdown_table(head, rows)


# ---- the renderers, one per kind of file ---------------------------------------------------------

def _gpu_run(run: GPURun, doc: dict[str, Any]) -> list[str]:
    opts = doc.get("options") or {}
    facts = [f"started {doc['started']}"] + ([f"build {doc['build']}"] if doc.get("build") else []) + [
        f"torch {doc['torch']}", f"{opts.get('budget')} candidates timed per config (budget)"]
    lines = [f"### {doc['device']}, {doc['started'][:10]}: {_link(run.file)}", "", "; ".join(facts) + ".", ""]
    lines += _commands(run.commands)
    if run.searches:
        lines += [f"The search results it tuned: {_link(run.searches + '/')}.", ""]
    if run.tvm:
        lines += [f"TVM's columns: {_link(run.tvm)} (the tvm step of this tree's calls).", ""]
    return lines + [format_table(doc), ""]


def _tvm_gpu(docs: list[Any]) -> str:
    (doc,) = docs
    rows = [[r["workload"], config_text(r["config"]), num_text(r.get("tvm_graph_us")), num_text(r.get("tvm_us")),
             "NaN" if math.isnan(r["tvm_error"]) else f"{r['tvm_error']:.1e}", "yes" if r["tvm_exact"] else "no"]
            for r in doc["rows"]]
    return (f"TVM {doc['tvm']} on {doc['device']}, its runtime alone; µs.\n\n"
            + markdown_table(["workload", "config", "TVM graph", "TVM called", "error vs float32",
                              "within float16 accuracy"], rows))


def _tvm_cpu(docs: list[Any]) -> str:
    before, after = docs
    old = {json.dumps([r["workload"], r["config"]]): r for r in before["rows"]}

    def err(r: dict[str, Any]) -> str:
        return f"{r['tvm_error']:.1e}" + ("" if r["tvm_exact"] else " (inexact)")

    rows = [[r["workload"], config_text(r["config"]), err(old[json.dumps([r["workload"], r["config"]])]), err(r)]
            for r in after["rows"]]
    return (f"TVM {after['tvm']} on the {after['device']} (llvm), its runtime alone; relative error against the "
            "float32 reference, '(inexact)' past float16 accuracy.\n\n"
            + markdown_table(["workload", "config", "error before", "error after"], rows))


def _report(plots: bool) -> Callable[[list[Any]], str]:
    """A `prism bench` report (prism.bench.paper_report.markdown) inside this page: its title dropped, its sections one
    level down, its plots linked in the results folder if `plots` (they are kept there), else left out. A run that
    recorded no choices measured no generality table."""
    def render(docs: list[Any]) -> str:
        (results,) = docs
        if "choices" not in results:
            results = results | {"plan": results.get("plan", {}) | {"generality": False}}
        lines = []
        for line in markdown(results).splitlines()[2:]:
            image = re.fullmatch(r"!\[(.*)\]\((.*)\)", line)
            if not image:
                lines.append("#" + line if line.startswith("#") else line)
            elif plots:
                lines.append(f"![{image[1]}]({LINK}/{image[2]})")
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()

    return render


def _search_compare(docs: list[Any]) -> str:
    """As benchmarks/search_compare.py writes its OUT.md: medians per workload and tree."""
    (records,) = docs
    head = ["workload", "graphs before / after", "verified / mappings before", "verified / mappings after",
            "seconds before", "seconds after", "speedup"]
    rows = []
    for name in _jobs(records):
        side = _sides(records, name)
        med = {s: statistics.median(r["seconds"] for r in rs) for s, rs in side.items()}
        graphs = {s: "/".join(sorted({str(r["graphs"]) + ("" if r.get("safe") is None else f" ({r['safe']} safe)")
                                      for r in rs})) for s, rs in side.items()}
        counts = {s: f"{rs[0]['verified']:,} / {rs[0]['mappings']:,}" for s, rs in side.items()}
        each = {s: ", ".join(f"{r['seconds']:.1f}" for r in rs) for s, rs in side.items()}
        rows.append([name, f"{graphs['before']} / {graphs['after']}", counts["before"], counts["after"],
                     f"{med['before']:.2f} ({each['before']})", f"{med['after']:.2f} ({each['after']})",
                     f"{med['before'] / med['after']:.1f}x"])
    return (f"Medians of {_runs(records)} run(s); seconds of each run in brackets.\n\n"
            + markdown_table(head, rows))


def _search_scaling(docs: list[Any]) -> str:
    """As benchmarks/search_scaling.py writes its OUT.md: checks per second by backend and workers, then how the
    simulated cluster's last run split the tasks."""
    (runs,) = docs
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["backend"], r["workers"])].append(r)
    rows = [[backend, n, f"{statistics.median(r['checks'] / r['check_s'] for r in g):.0f}",
             *(f"{statistics.median(r[k] for r in g):.2f}" for k in ("check_s", "generate_s", "seconds")),
             "/".join(sorted({str(r["graphs"]) for r in g}))] for (backend, n), g in groups.items()]
    first = runs[0]
    text = (f"Workload {first['workload']}: {first['checks']} checks ({first['mappings']} mappings), {first['graphs']} "
            f"graphs; medians of {max(len(g) for g in groups.values())} runs.\n\n"
            + markdown_table(["backend", "workers", "checks/s", "check s", "generate s", "search s", "graphs"], rows))
    split = [r["split"] for r in runs if "split" in r][-1]
    nodes = [[node, *(f"{row.get(k, 0):.0f}" for k in ("prefilter_tasks", "prefilter_candidates", "verify_tasks",
                                                       "verify_candidates")), f"{row.get('busy_s', 0):.2f}"]
             for node, row in split.items()]
    return (text + f"\n\nThe simulated cluster's last run ({len(split)} one-CPU nodes): how the tasks split.\n\n"
            + markdown_table(["node", "prefilter tasks", "prefilter candidates", "verify tasks", "verify candidates",
                              "busy s"], nodes))


def _tune_compare(docs: list[Any]) -> str:
    """As benchmarks/tune_compare.py writes its OUT.md: seconds per tuning phase and the choice, per job."""
    (records,) = docs
    phases = ("space", "rank", "compile", "total")
    framed = any("frames" in r for r in records)
    rows = []
    for name in _jobs(records):
        side = _sides(records, name)
        med = {s: {p: statistics.median(r["seconds"].get(p, 0.0) for r in rs) for p in phases}
               for s, rs in side.items()}
        text = {s: f"{m['total']:.1f} ({m['space']:.1f} / {m['rank']:.1f} / {m['compile']:.1f})"
                for s, m in med.items()}
        chosen = {s: "; ".join(sorted({f"{r['chosen']} ({r['estimate_us']:.2f} µs)" for r in rs}))
                  for s, rs in side.items()}
        rows.append([name, f"{side['after'][0]['points']:,}", text["before"], text["after"],
                     f"{med['before']['total'] / med['after']['total']:.1f}x", chosen["before"], chosen["after"]]
                    + ([frames_text(side["before"]), frames_text(side["after"])] if framed else []))
    return (f"Medians of {_runs(records)} run(s), an empty Triton cache each; the choice with the cost model's "
            "estimate" + ("; of the fused candidates compiled for sm_90, those with a stack frame" if framed else "")
            + ".\n\n"
            + markdown_table(["job", "points", "seconds before (space / rank / compile)",
                              "seconds after (space / rank / compile)", "speedup", "chosen before", "chosen after"]
                             + (["stack frames before", "stack frames after"] if framed else []), rows))


def frames_text(runs: list[dict[str, Any]]) -> str:
    """Of the fused candidates a tuning compiled (its first run's `frames`: each one's largest stack frame), how many
    have a stack frame, of how many, and the largest; "—" where the run did not record them."""
    frames = runs[0].get("frames")
    if frames is None:
        return "—"
    spilled = [f for f in frames if f]
    return f"{len(spilled)} of {len(frames)}" + (f", at most {max(spilled)} B" if spilled else "")


def _rank_climb(docs: list[Any]) -> str:
    """As benchmarks/rank_climb.py prints it: ranking every tiling, the climb, and a uniform sample."""
    (rows,) = docs
    cells = [[r["workload"], config_text(r["config"]), r["tilings"],
              f"{r['whole']['best_us']:.2f}, {r['whole']['cpu_s']:.1f}",
              f"{r['climb']['ranked']}, {r['climb']['best_ratio']:.3f}, {r['climb']['top16_gap']:.3f}, "
              f"{r['climb']['cpu_s']:.1f}",
              f"{r['uniform']['best_ratio']:.3f}, {r['uniform']['top16_gap']:.3f}, {r['uniform']['cpu_s']:.1f}"]
             for r in rows]
    return ("best ×: the best estimate found over the best of ranking every tiling; top-16 gap: the mean, over the "
            "16 best distinct tilings, of each one's estimate over the whole ranking's of the same rank.\n\n"
            + markdown_table(["workload", "config", "tilings", "whole: best µs, CPU s",
                              "climb: tilings, best ×, top-16 gap, CPU s",
                              "uniform sample: best ×, top-16 gap, CPU s"], cells))


def _split_kv_tail(docs: list[Any]) -> str:
    """As benchmarks/split_kv_tail.py prints it: each split-KV form, two kernels or one with a tail."""
    (doc,) = docs
    rows = doc["rows"]

    def num(r: dict[str, Any], key: str, fmt: str = "{:.1f}") -> str:
        return fmt.format(r[key]) if key in r else "-"

    cells = []
    for r in rows:
        two = next(a for a in rows if (a["workload"], a["config"], a["splits"], a["form"])
                   == (r["workload"], r["config"], r["splits"], "two kernels"))
        cells.append([r["workload"], config_text(r["config"]), f"{r['splits']}x{r['loop']}", r["form"],
                      f"{r['estimate_us']:.2f}",
                      "/".join(map(str, r["registers"])) + (" (spills)" if r["spills"] else ""),
                      num(r, "graph_us"), num(r, "called_us"),
                      f"{r['graph_us'] / two['graph_us']:.2f}x" if "graph_us" in r else "-",
                      num(r, "distinct_outputs", "{}"), num(r, "rel_err_at_std30", "{:.1e}")])
    return (f"Device: {doc['device']}.\n\n"
            + markdown_table(["workload", "config", "splits x loop", "form", "model µs", "registers", "graph µs",
                              "called µs", "graph vs two kernels", "distinct outputs", "rel. err at std 30"], cells))


def _interrupts(docs: list[Any]) -> str:
    """As benchmarks/interrupts.py prints it, per command: how the interrupted runs ended."""
    (doc,) = docs
    rows = []
    for name, length in doc["lengths_s"].items():
        mine = [r for r in doc["runs"] if r["command"] == name]
        hit = [r for r in mine if r["took_s"] is not None]
        rows.append([name, f"{length:.1f}", len(hit), sum(r["code"] == 130 for r in hit),
                     sum(r["code"] == -2 for r in hit), sum(r["took_s"] < 2.0 for r in hit),
                     f"{max((r['took_s'] for r in hit), default=0):.2f}", len(mine) - len(hit),
                     sum(r["traceback"] for r in mine)])
    return (f"{doc['workload']}, seed {doc['seed']}.\n\n"
            + markdown_table(["command", "uninterrupted s", "interrupted", "exit 130", "killed by SIGINT",
                              "ended within 2 s", "slowest s", "ended before the signal", "tracebacks"], rows))


def _progress(docs: list[Any]) -> str:
    """As benchmarks/compile_progress.py prints it: seconds after the first call until each kind of record."""
    (doc,) = docs
    keys = {"first_record_s": "first record", "first_region_s": "first region", "first_summary_s": "summary",
            "total_s": "first outputs back"}
    rows = [[what, *(f"{r[key]:.2f}" if r[key] is not None else "-" for r in doc["runs"])] for key, what in keys.items()]
    first = doc["runs"][0]["records"]
    return (f"{doc['snippet']}, {doc['cpus']} CPUs.\n\n"
            + markdown_table(["seconds after the first call", *(f"run {k + 1}" for k in range(len(doc["runs"])))], rows)
            + "\n\nThe first run's first records:\n\n"
            + markdown_table(["s", "record"], [[f"{t:.2f}", f"`{m}`"] for t, m in first[:4]]))


def first_compile_table(doc: dict[str, Any]) -> str:
    """As benchmarks/first_compile.py prints it: per backend the medians of its cold and warm first compiles (each
    run's in brackets), against Inductor's, the seconds until every region is optimized, and the error."""
    runs = doc["runs"]
    inductor = {key: statistics.median(r[key] for r in runs["inductor"]) for key in ("first_s", "warm_s")}
    rows = []
    for backend, rs in runs.items():
        med = {key: statistics.median(r[key] for r in rs) for key in ("first_s", "ready_s", "warm_s")}
        each = {key: ", ".join(f"{r[key]:.1f}" for r in rs) for key in ("first_s", "warm_s")}
        rows.append([backend, f"{med['first_s']:.1f} ({each['first_s']})",
                     f"{med['first_s'] / inductor['first_s']:.2f}",
                     "" if backend == "inductor" else f"{med['ready_s']:.1f}",
                     f"{med['warm_s']:.1f} ({each['warm_s']})", f"{med['warm_s'] / inductor['warm_s']:.2f}",
                     f"{max(r['max_error'] for r in rs):.1e}"])
    n = len(runs["inductor"])
    return (f"{doc['model']}: first compile on {doc['cores']} cores, cold and warm caches, medians of {n}\n\n"
            + markdown_table(["backend", "cold first compile s", "/ Inductor", "every region optimized after s",
                              "warm first compile s", "/ Inductor", "max \\|error\\| vs eager"], rows))


def _first_compile(docs: list[Any]) -> str:
    return "\n\n".join(first_compile_table(doc) for doc in docs)


NORM_OPS = ("aten.rsqrt", "aten.var_mean", "aten.native_layer_norm", "aten.layer_norm", "aten.rms_norm")
"""ATen ops that mark a norm: a cone left to torch that holds one has left a norm to torch."""


def families_table(results: list[dict[str, Any]]) -> str:
    """As benchmarks/families.py prints it: per family its status, the largest |logits - eager|, the graphs
    compiled, the regions fused, the cones left to torch (ops in no cone are not a cone) and those that hold a
    norm, the decode step's launches (Prism's kernels + torch's ops, where the run recorded them), and the seconds
    of the compiled prefill and decode step."""
    rows = []
    for r in results:
        status = r["status"] if r["status"] in ("match", "differs") else f"{r['status']}: {r.get('why', '')}"
        left = [x for x in r.get("left", []) if x["why"] != "not in a cone Prism took"]
        norms = [x for x in left if any(o.startswith(NORM_OPS) for o in x["ops"])]
        ran = "left" in r
        step = r["launches"][-1] if r.get("launches") else None
        rows.append([r["family"], status.replace("|", "\\|").replace("\n", " "),
                     f"{r['error']:.1e}" if "error" in r else "", r.get("graphs", ""), r.get("fused", ""),
                     len(left) if ran else "", len(norms) if ran else "",
                     f"{step['prism']} + {step['rest']}" if step and step["rest"] is not None else "",
                     f"{r['seconds']:.0f}" if "seconds" in r else ""])
    return markdown_table(["family", "status", "max \\|logits - eager\\|", "graphs", "regions fused", "cones left",
                           "of them with a norm", "decode step launches (Prism + torch)", "s"], rows)


def _families(docs: list[Any]) -> str:
    (doc,) = docs
    counts = defaultdict(int)
    for r in doc["results"]:
        counts[r["status"]] += 1
    return (f"`{doc['command']}`: transformers {doc['transformers']}, torch {doc['torch']}, {doc['cores']} cores; "
            + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + ".\n\n"
            + families_table(doc["results"]))


def _every_size(docs: list[Any]) -> str:
    """As benchmarks/every_size.py --model prints it, per file: the model's µs at each odd KV length."""
    parts = []
    for doc in docs:
        rows = [[r["kv"], f"{r['estimate_us']:.2f}", f"{r['below_us']:.2f}", f"{r['above_us']:.2f}",
                 f"{r['scaled_ratio']:.2f}", f"{r['neighbour_ratio']:.2f}", r["chosen"]] for r in doc["rows"]]
        tunings = doc["tunings"]
        parts.append(f"Decode attention {config_text(doc['config'])}, float16, the cost model's µs on "
                     f"{doc['target']}; {sum(tunings.values())} tunings over {len(tunings)} size buckets.\n\n"
                     + markdown_table(["kv", "est µs", "est at p/2", "est at p", "/ (est(p)·kv/p)",
                                       "/ neighbours' line", "served"], rows))
    return "\n\n".join(parts)


def _samples(docs: list[Any]) -> str:
    """Each oracle file: its GPU, where its candidates come from, how many of how many configs."""
    rows = []
    for name, doc in zip(SAMPLE_FILES, docs):
        groups = {s["group"] for s in doc["samples"]}
        rows.append([_link(name), doc["device"], doc.get("source", "-"),
                     len(doc["samples"]), len(groups), "; ".join(f"`{c}`" for c in SAMPLES[name]) or NOT_RECORDED])
    return markdown_table(["file", "GPU", "candidates from", "candidates", "configs", "command"], rows)


# ---- the sections --------------------------------------------------------------------------------

def _compare(old: str, *args: str) -> str:
    return "python benchmarks/search_compare.py " + " ".join((old,) + args)


SAMPLES = {name: tuple(commands) for name, commands in PROVENANCE["samples"].items()}
SAMPLE_FILES = tuple(SAMPLES)

SEARCH_RUNS = "--runs 3 --workers 2 --out"
TABLES = [
    Table("TVM on the H200", tuple(PROVENANCE["tables"]["tvm_gpu"]), (TVM_PREPARE, (
        f"{GPU_CALL_H200} --steps gpu_bench,tvm --workloads rmsnorm,rmsnorm_mlp,swiglu,attention,qk_attention,lora,"
        "rmsnorm_linear --seconds 545 (its tvm step: python benchmarks/tvm_bench.py run --build tvm-build "
        "--out $OUT/tvm.json)")),
        "TVM's Relax builds of each workload's torch formula with its default GPU schedules (dlight), built on a CPU "
        "and run on the GPU with TVM's runtime only. The configs whose output missed the reference have no ratio "
        "in the tables above.", _tvm_gpu),
    Table("TVM on a CPU, before and after torch's math is spelled out", tuple(PROVENANCE["tables"]["tvm_cpu"]), (
        "python benchmarks/tvm_bench.py prepare --target llvm --out DIR",
        "python benchmarks/tvm_bench.py run --build DIR --out DIR/tvm.json"),
        "Before: the parent of 10e5c93; after: `tvm_bench.torch_semantics` writes a square as a product and a "
        "float16 mean as float32 values, as torch computes them.", _tvm_cpu),
    Table("The paper's search tables", ("results.json",), (
        "python benchmarks/search_tables.py --json results.json",
        f"python -m prism bench --out {RESULTS} --report-only"),
        "The search times, unique graphs and ablation of the paper's evaluation (§7.3-7.5), measured on a CPU, "
        "beside the paper's published figures (as `prism.bench.paper_search` holds them; the only figures on this "
        "page not read from a result file). `search_tables.py` has since been replaced by `python -m prism bench "
        "--out DIR` (the same measurements); the second command rewrites the report from the stored records.",
        _report(plots=True)),
    Table("Generality: every program end to end", ("generality_cpu/results.json",), (
        "prism bench --quick --out /tmp/bench-gen --workers 2 -q",),
        "Every program's symbolic search, the kernel the cost model chooses from it, and that kernel's numeric "
        "check, on a CPU (no GPU columns); its plots were not kept.", _report(plots=False)),
    Table("Search time: batched checks", ("search_compare.json",), (_compare("/tmp/old", ". --runs 3"),),
          "Before: b4fae2f; after: the verifier checks a batch of candidates in one e-graph, the prefilter runs one "
          "parallel dim at a time.", _search_compare),
    Table("Search time: safe softmax", ("safe_softmax_compare.json",), (_compare(
        "OLD", f". --workloads attention,qk_attention --runs 3 --out {RESULTS}/safe_softmax_compare"),),
        "Before: 2c6f1d4 (programs without the row max); after: programs that subtract the row max, so the "
        "search also finds the max-subtracted forms. 'safe': graphs `prism.tune.safety.overflow_risk` finds no "
        "risk in.", _search_compare),
    Table("Search time: split-KV partials", ("partials_compare.json",), (_compare(
        "OLD", f". --workloads attention,qk_attention,rmsnorm_mlp --runs 1 --out {RESULTS}/partials_compare"),),
        "Before: d026dd5; after: every mapping whose outputs a grid dim sums also gets its partials variant (the "
        "blocks' tiles side by side, summed by a second kernel).", _search_compare),
    Table("Search time: the split-KV combine as a tail", ("search_compare_tail.json",), (_compare(
        "OLD", "NEW --workloads attention,gqa,qk_attention --runs 1 --workers 2 --out search_compare_tail"),),
        "After: each partials form also gets a tail sibling, its combine run by the last block of each row in "
        "one launch.", _search_compare),
    Table("Search time: the prefilter's smaller extent", ("search_compare_prefilter.json",), (_compare(
        "OLD", ". --workloads rmsnorm,swiglu,attention,gqa,lora,moe,rmsnorm_linear --runs 1 --workers 2 --out "
        f"{RESULTS}/search_compare_prefilter"),),
        "Before: 98cd845 (the prefilter at extent 8); after: at extent 4.", _search_compare),
    Table("Search time: the generator's bound", ("search_compare_bound.json",), (_compare(
        "OLD", f". {SEARCH_RUNS} {RESULTS}/search_compare_bound"),),
        "Before: d94d639; after: 5459234, whose generator drops a state when two of its consumer-less tensors "
        "cannot both be finished within the op budget.", _search_compare),
    Table("Search time: the decoder forms", ("search_compare_decoder_forms.json",), (_compare(
        "OLD", f". {SEARCH_RUNS} {RESULTS}/search_compare_decoder_forms"),),
        "Before: c39cd89; after: the forms a real decoder layer needs (the axiom mul-div, a residual or bias met "
        "after the loop).", _search_compare),
    Table("Search time: fewer garbage collections", ("search_compare_gc.json",), (_compare(
        "OLD", f". {SEARCH_RUNS} {RESULTS}/search_compare_gc"),),
        "Before: eb78efc; after: the same search code, with the cyclic garbage collector's thresholds raised in "
        "the workers and during a search.", _search_compare),
    Table("Search time: split K for the norm", ("search_compare_split_k.json",), (_compare(
        "OLD", f". {SEARCH_RUNS} {RESULTS}/search_compare_split_k"),),
        "Before: 95f4db7; after: outputs written once along a grid dim, and up to three kernel-level ops where a "
        "norm divides a projection.", _search_compare),
    Table("Search time: each pass's rules in its own table", ("search_compare_pass_rules.json",), (_compare(
        "OLD", f". --runs 1 --workers 2 --out {RESULTS}/search_compare_pass_rules"),),
        "Before: df5a302; after: the node kinds' executor, encoding, emission and cost rules moved from the IR's "
        "records into each pass's table, and the import circles broken (moved code: the same graphs).",
        _search_compare),
    Table("Search time: one name per module", ("search_compare_names.json",), (_compare(
        "OLD", f". --runs 1 --workers 2 --out {RESULTS}/search_compare_names"),),
        "Before: 15236f1; after: a8e3cb9 (modules renamed so each name is one module, the settings objects in one "
        "module, the egglog constructors and CUDA's grid limit out of the IR, superoptimize's RunOptions, the "
        "generator's Draft). Moved and renamed code must find the same graphs; one run each on a 2-core machine "
        "running other work, so the seconds compare nothing.", _search_compare),
    Table("Search time: the canonical order in the generator's bound", ("search_compare_late.json",), (_compare(
        "OLD", f". --runs 1 --workers 2 --out {RESULTS}/search_compare_late"),),
        "Before: a36e62f; after: the generator also drops a state where a consumer-less tensor the canonical order "
        "has passed can take no one-input op any more and no op with a newer operand finishes it within the op "
        "budget. The same graphs and mappings.", _search_compare),
    Table("Search time: the executor's block axes and the generator's states", ("search_compare_executor.json",), (
        _compare("OLD", f". --runs 1 --workers 2 --out {RESULTS}/search_compare_executor"),),
        "Before: 5e997aa; after: the executor takes the block axes' shape as the largest of each instead of "
        "torch.broadcast_shapes, and the generator builds each state with its constructor instead of "
        "dataclasses.replace. The same graphs and mappings.", _search_compare),
    Table("Search throughput against workers: attention", ("search_scaling_attention.json",), (
        f"PYTHONPATH=. python benchmarks/search_scaling.py --workload attention --runs 3 --out "
        f"{RESULTS}/search_scaling_attention",),
        "One search's checks on a process pool, on a local Ray, and on a simulated Ray cluster of one-CPU nodes "
        "sharing the same cores.", _search_scaling),
    Table("Search throughput against workers: QK-Attention", ("search_scaling_qk_attention.json",), (
        f"PYTHONPATH=. python benchmarks/search_scaling.py --workload qk_attention --runs 3 --out "
        f"{RESULTS}/search_scaling_qk_attention",),
        "As above, for QK-Attention.", _search_scaling),
    Table("Tuning time, before and after", ("tune_compare.json",), (
        "python benchmarks/tune_compare.py OLD NEW --search-dir DIR --jobs rmsnorm:0,swiglu:1,attention:0,"
        "attention:1,qk_attention:0,qk_attention:1 --runs 1 --workers 2",),
        "Before: 6f08cd6; after: the space's tilings filtered per variable, the ranking on the tuning's worker "
        "pool. Both trees tune the same saved search results on a CPU; a speed-up must not change the choice.",
        _tune_compare),
    Table("Tuning, before and after each pass's rules in its own table", ("tune_compare_pass_rules.json",), (
        "python benchmarks/tune_compare.py OLD NEW --search-dir DIR --jobs rmsnorm:0,swiglu:1,attention:0,attention:1 "
        f"--runs 1 --workers 2 --out {RESULTS}/tune_compare_pass_rules",),
        "Before: df5a302; after: 5cb8e1c. Moved code must keep every choice; the seconds are one run each on a "
        "2-core machine that was running tests at the same time, so they compare nothing.", _tune_compare),
    Table("Ranking a tuning space by climbing", ("rank_climb.json",), ("python benchmarks/rank_climb.py",),
          "The cost model's ranking of every tiling of each config's space, against ranking a stratified sample "
          "and hill climbing from its best, and against a uniform sample.", _rank_climb),
    Table("The split-KV combine as a tail: the cost model", ("split_kv_tail_cpu.json",), (
        "python benchmarks/split_kv_tail.py --out split_kv_tail.json",),
        "The safe split-KV form at each decode config and two split counts, its combine a second kernel or run by "
        "the last block of each row. On a CPU only the cost model's estimate (with the sm_90 compiler's "
        "registers) is filled; the GPU columns are empty.", _split_kv_tail),
    Table("Decode attention at every KV length: the cost model", (
        "every_size_model_b2.json", "every_size_model_b32.json"), (
        f"python benchmarks/every_size.py --model --config 2,8,128 --budget 8 --out {RESULTS}/every_size_model_b2.json",
        f"python benchmarks/every_size.py --model --budget 8 --out {RESULTS}/every_size_model_b32.json"),
        "One DynamicGraph serves every KV length; at each odd length the model's estimate of what it serves, "
        "against the powers of two around it (p/2, p): scaled by length, and against the line through its "
        "neighbours.", _every_size),
    Table("A compile said as it goes", ("compile_progress_cpu.json",), (
        f"python benchmarks/compile_progress.py --out {RESULTS}/compile_progress_cpu.json",),
        "The README's Llama snippet as pasted, cold (an empty result cache), with every record of the \"prism\" "
        "logger at INFO timed from the first call of the compiled forward.", _progress),
    Table("First compile of a whole model, cold and warm", ("first_compile_gpt2_cpu.json",), (
        f"python benchmarks/first_compile.py --model gpt2 --runs 1 --out {RESULTS}/first_compile_gpt2_cpu.json",),
        "examples/hf_decode.py's 2-layer GPT-2, its prefill and one decode step, each backend in a fresh process "
        "with empty caches (cold), then again with the caches the first filled (warm), on a 2-core CPU.",
        _first_compile),
    Table("Every transformers family through the backend", ("families_cpu.json",), None,
          "Each causal-LM family `transformers` ships, from a small random config (examples/hf_decode.py's "
          "`config`), eager and through `backend=\"prism\"` (the tests' settings: the rest eager, 2 candidates) on "
          "one prompt and one decode step, each family in a fresh process with a time limit; the families of one "
          "run share a result cache.", _families),
    Table("Every transformers family as the family test runs it", ("families_blocks6_cpu.json",), None,
          "As above, each search kept to blocks of 6 ops as tests/capture/test_families.py keeps it (a count, not a "
          "time): what the tests check of every family, with what each fuses and leaves to torch.", _families),
    Table("Tuning, before and after one name per module", ("tune_compare_names.json",), (
        "python benchmarks/tune_compare.py OLD NEW --search-dir DIR --jobs rmsnorm:0,swiglu:1,attention:0,attention:1 "
        f"--runs 1 --workers 2 --out {RESULTS}/tune_compare_names",),
        "Before: 15236f1; after: a8e3cb9, as above. Both trees tune the same saved search results (searched by the "
        "earlier tree); the choices must be the same.", _tune_compare),
    Table("MoE's tuning, before and after streamed contractions", ("tune_compare_stream.json",), (
        f"python benchmarks/tune_compare.py OLD NEW --search-dir {RESULTS}/{_searches_of(COMPARE_NOW[0])} "
        f"--jobs moe:0 --runs 2 --workers 2 --out {RESULTS}/tune_compare_stream",),
        "Before: 478b022; after: the tree that sums a long contraction of two loaded tiles over K in chunks "
        "(prism.codegen.stream, docs/fused-forms.md), carries a batch-1 dot's accumulator in tl.dot's shape, and "
        "compiles candidates with the strides a launch on contiguous inputs passes. Both tune the MoE expert "
        "(e 8, n 16, d 2048, f 1408) from the saved search the latest H200 run tuned, on a 2-core CPU (the cost model ranks; "
        "candidates compile for sm_90): the choice, the seconds, and the stack frames of the fused candidates "
        "compiled.", _tune_compare),
    Table("Ctrl-C at random moments", ("interrupts_cpu.json",), (
        f"python benchmarks/interrupts.py --runs 50 --out {RESULTS}/interrupts_cpu.json",),
        "`prism tune` and `prism optimize` sent SIGINT (to the process group, as a terminal does) at a seeded "
        "random moment of each run, on a 2-core CPU: how each interrupted run ended and how long after the signal. "
        "'killed by SIGINT': the signal landed while the interpreter exited after the run (a shell reports 130).",
        _interrupts),
    Table("Oracle samples: candidates measured on a GPU", SAMPLE_FILES, None,
          "Every candidate a GPU timed, kept so that the cost model's picks can be replayed on a CPU "
          "(`python benchmarks/tune_calibrate.py regret --kind K FILES`, tests/tune/test_oracle.py). e and f came "
          "from their GPU calls' from-bench step, their searches not kept, and their spill flags were set again "
          "afterwards from their stored fields.", _samples),
]
"""Every section after the GPU runs, in the page's order: what a user checks first (kernels against other
compilers), then the search, the tuner, and the cost model's own figures."""


# ---- the page ------------------------------------------------------------------------------------

def _read(results: Path, name: str) -> Any:
    return json.loads((results / name).read_text(encoding="utf-8"))


def _commands(commands: tuple[str, ...] | None) -> list[str]:
    if commands is None:
        return ["Commands: each file's, in the table.", ""]
    if not commands:
        return [f"Command: {NOT_RECORDED}.", ""]
    return ["Command" + ("s, in order:" if len(commands) > 1 else ":"), "", "```", *commands, "```", ""]


def _unread(results: Path) -> list[str]:
    """JSON files under `results` that no section reads, relative to it (a search folder counts as read)."""
    read = ({"provenance.json"} | {r.file for r in GPU_RUNS} | {r.tvm for r in GPU_RUNS if r.tvm}
            | {f for t in TABLES for f in t.files})
    folders = tuple(r.searches + "/" for r in GPU_RUNS if r.searches)
    names = (p.relative_to(results).as_posix() for p in results.rglob("*.json"))
    return sorted(n for n in names if n not in read and not n.startswith(folders))


def page(results_dir: str | os.PathLike[str]) -> str:
    """The page's markdown, from the JSON files under `results_dir` (a missing file named here is an error)."""
    results = Path(results_dir)
    runs = _joined(results)
    lines = ["# Benchmarks", "",
             f"Generated by `python -m prism.bench.pages` from {RESULTS}/*.json; do not edit. Every measured "
             "figure below is read from a stored result file, named with the command that wrote it.", "",
             "## Summary", "",
             SUMMARY_NOTE, "",
             _summary(runs), "",
             "No stored result holds a real-model decode step (`benchmarks/hf_decode.py` prints its step times and "
             "saves none), so the summary has none.", "",
             "## GPU kernel times", "",
             f"Each `benchmarks/gpu_bench.py` run kept under {RESULTS}, newest first; each table as `prism.bench.gpu."
             "format_table` prints it.", ""]
    by_file = {r.file: r for r in GPU_RUNS}
    for file, doc in reversed(runs):
        lines += _gpu_run(by_file[file], doc)
    docs = {name: _read(results, name) for name in COMPARE_BEFORE + COMPARE_NOW}
    lines += ["### The H200 runs against each other", "",
              "Prism's CUDA-graph µs per config in the later tree's two calls beside the earlier tree's, and the "
              f"configs that moved by more than {SLOWER - 1:.0%} either way (`prism.bench.gpu.against`).", ""]
    now, before = (" ".join(f"{RESULTS}/{n}" for n in names) for names in (COMPARE_NOW, COMPARE_BEFORE))
    lines += _commands((f"python benchmarks/gpu_run.py compare {now} --before {before}",))
    lines += [against([docs[n] for n in COMPARE_NOW], [docs[n] for n in COMPARE_BEFORE]), ""]
    for table in TABLES:
        lines += [f"## {table.title}", "", f"From {', '.join(_link(f) for f in table.files)}. {table.note}", ""]
        lines += _commands(table.commands)
        lines += [table.render([_read(results, f) for f in table.files]), ""]
    unread = _unread(results)
    if unread:
        lines += ["## Stored results without a table here", "", ", ".join(_link(n) for n in unread) + ".", ""]
    return "\n".join(lines)


def write_benchmarks_page(results_dir: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> Path:
    """Write `page(results_dir)` to `out_path` (its folder made if missing); returns the path written."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(results_dir), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m prism.bench.pages [RESULTS_DIR OUT]`: write the page; 2 with a usage line on other arguments."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (0, 2):
        print("usage: python -m prism.bench.pages [RESULTS_DIR OUT]", file=sys.stderr)
        return 2
    results, out = args or [ROOT / RESULTS, ROOT / "docs" / "benchmarks.md"]
    print(write_benchmarks_page(results, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
