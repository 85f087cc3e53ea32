"""The paper's search measurements (§7.3-7.5): which searches to run, running them, and the paper's numbers.

Three tables, each measured here and shown beside the paper's figures:
  1. search time per workload: Prism's symbolic search (once per workload, at config 1's shapes) and
     the fully concrete Mirage-style mode (maps, grid sizes and loop ranges enumerated during the
     search, once per config; "x" when it hits its time limit, as in the paper);
  2. unique graphs found (structure + maps; sizes do not count);
  3. the ablation on RMSNorm (n=8, d=4096): imap/fmap/omap symbolic (S) or concrete (C).

Every search uses the default limits, the real verifier and the numeric cross-check. A measurement is
a flat record keyed by its run (workload, config, modes, time limit), so a run that stops part way is
resumed from the records it saved, and a record is reused only for exactly the same search.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import prism.workloads as wl
from prism.errors import InputError

__all__ = ["ABLATION_CONFIG", "NAMES", "NO_FIGURE", "PAPER_ABLATION", "PAPER_GRAPHS", "PAPER_THREADS", "PAPER_TIME",
           "Plan", "Run", "SEARCHES", "config_text", "graphs_text", "measure_search", "saved_or_searched",
           "search_path", "seconds_text"]

# ---- the paper's numbers -------------------------------------------------------------------------

PAPER_THREADS = 96
"""The paper's machine ran every search on 96 threads."""

PAPER_TIME = {n: wl.get(n).paper.search_seconds for n in wl.paper_names()}  # type: ignore[union-attr]
"""§7.3 search seconds, as the paper prints them: Mirage at config 1, at config 2, Prism ('x': time limit)."""

PAPER_GRAPHS = {n: wl.get(n).paper.graphs for n in wl.paper_names()}  # type: ignore[union-attr]
"""§7.4 unique graphs: Mirage at config 1, at config 2, Prism."""

PAPER_ABLATION = {"SSS": 0.3, "SSC": 2.5, "SCS": 5.5, "CSS": 20.5, "SCC": 5.5, "CSC": 22.5, "CCC": 312}
"""§7.5 search seconds on RMSNorm by imap/fmap/omap mode (S symbolic, C concrete), in the paper's order."""

ABLATION_CONFIG = {"n": 8, "d": 4096}
"""The RMSNorm config of the ablation."""

NAMES = {n: wl.get(n).display for n in wl.names()}
"""How tables spell each workload (the paper's spelling for its five)."""

NO_FIGURE = ("-", "-", "-")
"""The paper's columns of a workload it does not evaluate."""


# ---- what to measure -----------------------------------------------------------------------------

class Run(NamedTuple):
    """One search: a workload at a config in a mode under a time limit; `key` names its record."""

    name: str
    cfg: dict[str, int]
    modes: str
    limit: float

    @property
    def key(self) -> str:
        return json.dumps([self.name, self.cfg, self.modes, self.limit])


@dataclass(frozen=True)
class Plan:
    """Which searches a benchmark makes; saved with the records so the report rebuilds the same tables."""

    workloads: tuple[str, ...] = tuple(wl.names())
    mirage: bool = True
    mirage_limit: float = 300.0
    ablation: bool = True
    ablation_limit: float = 1800.0
    time_limit: float = 3600.0
    generality: bool = True  # the cost model's choice per workload, checked numerically (prism.bench.generality)

    def __post_init__(self) -> None:
        object.__setattr__(self, "workloads", tuple(self.workloads))
        unknown = [n for n in self.workloads if n not in wl.WORKLOADS]
        if unknown:
            raise InputError(f"unknown workload(s) {', '.join(map(repr, unknown))}; "
                             f"known workloads: {', '.join(wl.names())}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"workloads": list(self.workloads)}

    def symbolic(self, name: str) -> Run:
        """Prism's search of `name`: all maps symbolic, at config 1 (the sizes do not matter to it)."""
        return Run(name, wl.get(name).configs[0], "SSS", self.time_limit)

    def concrete(self, name: str) -> list[Run]:
        """The Mirage-style searches of `name`, one per config (everything enumerated), or none."""
        return [Run(name, cfg, "mirage", self.mirage_limit) for cfg in wl.get(name).configs] if self.mirage else []

    def ablations(self) -> list[Run]:
        """The RMSNorm ablation searches in the paper's order, or none."""
        if not self.ablation:
            return []
        return [Run("rmsnorm", ABLATION_CONFIG, m, self.ablation_limit) for m in PAPER_ABLATION]

    def runs(self) -> list[Run]:
        """Every search of the plan, in the order they are measured (fast symbolic ones first)."""
        return ([self.symbolic(n) for n in self.workloads] + [r for n in self.workloads for r in self.concrete(n)]
                + self.ablations())


# ---- formatting shared by progress lines and the report ------------------------------------------

def seconds_text(rec: dict[str, Any]) -> str:
    """A search's seconds as the paper prints them: '300x' when it was stopped by its time limit."""
    return f"{rec['seconds']:.0f}x" if rec["timed_out"] else f"{rec['seconds']:.1f}"


def graphs_text(rec: dict[str, Any]) -> str:
    """A search's unique graphs: '11*' when it was stopped first (only those found by then)."""
    return f"{rec['graphs']}{'*' if rec['timed_out'] else ''}"


def config_text(cfg: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items())


# ---- measuring -----------------------------------------------------------------------------------

SEARCHES = "searches"
"""The subfolder of a benchmark's folder where its symbolic search results are saved."""


def search_path(out: Path, name: str) -> Path:
    """Where a benchmark in folder `out` keeps the symbolic search result of workload `name` (what the
    generality table's choice and the GPU benchmark tune from)."""
    return out / SEARCHES / f"{name}.json"


def saved_or_searched(path: Path | None, graph: Any, say: Callable[[str], None], **options: Any) -> Any:
    """The SearchResult saved at `path` if this build of Prism saved it, else `graph` searched with `options`
    (and saved there when a path is given). A result saved by other code is searched again: it would lack
    what this build finds (a search saved before safe split-KV attention existed once made the tuner's picks
    for attention 7x slower than the baseline: benchmarks/results/gpu_bench_tuning_h100.json)."""
    from prism.provenance import build_id
    from prism.search import SearchResult, search

    if path is not None and path.exists():
        saved = SearchResult.load(path)
        if not saved.stale:
            return saved
        say(f"{path} was searched by Prism {saved.build}, not this build ({build_id()}); searching again")
    result = search(graph, **options)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        result.save(path)
    return result


def _measure(run: Run, workers: int | None, out: Path | None) -> dict[str, Any]:
    from prism.search import search

    t0 = time.perf_counter()
    r = search(wl.get(run.name).build(run.cfg), modes=run.modes, time_limit=run.limit, workers=workers)
    if out is not None and run.modes == "SSS":  # stopped at its limit too: its graphs are verified ones
        r.save(search_path(out, run.name))
    s = r.stats
    return {"workload": run.name, "cfg": run.cfg, "modes": run.modes, "seconds": time.perf_counter() - t0,
            "graphs": len(r), "timed_out": s["timed_out"], "states": s["generate"].get("states", 0),
            "structures": s["generate"]["structures"], "mappings": s["instantiate"]["mappings"],
            "verified": s["verify"]["verified"], "unsound": s["cross_check"]["unsound"],
            "generate_s": s["generate"]["seconds"], "check_s": s["check_wall_seconds"], "workers": s["workers"]}


def measure_search(plan: Plan, *, workers: int | None = None, records: dict[str, dict[str, Any]],
                   save: Callable[[dict[str, dict[str, Any]]], None] | None = None,
                   progress: Callable[[str], None] | None = None, out: Path | None = None) -> dict[str, dict[str, Any]]:
    """Make every search of `plan` that `records` lacks, adding each record to `records` as it is made.

    records: the measurements made so far, by `Run.key` (a resumed benchmark measures only the rest).
    out: the benchmark's folder, where each finished symbolic search is saved (`search_path`).
    save: called with `records` after every measurement, so an interrupted benchmark loses one search.
    progress: called with one human line before and after each search.
    The worker processes are started before the first timed search (starting one imports torch and
    egglog, seconds each) and reused, so the times are search times. Returns `records`.
    """
    from prism.search.parallel import Workers

    say = progress or (lambda line: None)
    runs = plan.runs()
    todo = [r for r in runs if r.key not in records]
    if len(todo) < len(runs):
        say(f"{len(runs) - len(todo)} of {len(runs)} searches already measured; {len(todo)} to go")
    if todo:
        Workers(workers).start()
    for run in todo:
        say(f"search {run.name} {run.modes} {config_text(run.cfg)} (limit {run.limit:.0f} s) ...")
        rec = records[run.key] = _measure(run, workers, out)
        if save is not None:
            save(records)
        say(f"{run.name} {run.modes} {config_text(run.cfg)}: {seconds_text(rec)} s, {rec['graphs']} graphs, "
            f"{rec['states']} states, {rec['structures']} structures, {rec['mappings']} mappings, "
            f"{rec['verified']} verified, {rec['unsound']} unsound")
    return records
