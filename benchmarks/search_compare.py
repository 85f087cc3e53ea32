"""Search time and unique graphs of two Prism source trees side by side (before and after a change).

Run: python benchmarks/search_compare.py OLD_TREE NEW_TREE [--workloads rmsnorm,...] [--runs 3] [--workers 2]
         [--out benchmarks/results/search_compare]
Writes OUT.json (every run) and OUT.md (medians per workload and tree).

Each search is the symbolic search of a workload at config 1 with default limits (as `prism bench --quick`),
in a fresh process importing Prism from one tree (benchmarks/trees.py), its worker processes started before
the clock starts. Fresh processes, because workers keep verdicts for later searches of the same program.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from trees import SIDES, side_by_side

CHILD = """
import json, os, sys, time
import prism.workloads as wl
from prism.search import search
from prism.search.parallel import Workers
name, workers = sys.argv[1], int(sys.argv[2])
Workers(workers).start()
w = wl.get(name)
load = os.getloadavg()[0]
t0 = time.perf_counter()
r = search(w.build(w.configs[0]), workers=workers)
seconds = time.perf_counter() - t0
s = r.stats
try:  # graphs that cannot overflow (prism.tune.safety), in trees that have the check
    from prism.tune.safety import overflow_risk
    safe = sum(overflow_risk(r.instantiate(i)) is None for i in range(len(r)))
except ImportError:
    safe = None
print(json.dumps({"seconds": seconds, "graphs": len(r), "safe": safe, "mappings": s["instantiate"]["mappings"],
                  "verified": s["verify"]["verified"], "check_s": s["check_wall_seconds"],
                  "generate_s": s["generate"]["seconds"], "unsound": s["cross_check"]["unsound"], "load": load}))
"""

WORKLOADS = "rmsnorm,rmsnorm_mlp,swiglu,attention,qk_attention"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--workloads", default=WORKLOADS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/search_compare")
    args = ap.parse_args()
    out = Path(args.out)
    names = args.workloads.split(",")
    runs = side_by_side(CHILD, args.old, args.new, [(n, [n, str(args.workers)]) for n in names], args.runs, out,
                        lambda r: f"{r['seconds']:.2f} s, {r['graphs']} graphs, load {r['load']:.1f}")
    lines = [f"Medians of {args.runs} runs, {args.workers} workers; seconds of each run in brackets.", "",
             "| workload | graphs before / after | verified / mappings before | verified / mappings after | "
             "seconds before | seconds after | speedup |", "|---|---|---|---|---|---|---|"]
    for name in names:
        side = {s: [r for r in runs if r["job"] == name and r["side"] == s] for s in SIDES}
        med = {s: statistics.median(r["seconds"] for r in side[s]) for s in SIDES}
        graphs = {s: "/".join(sorted({str(r["graphs"]) + ("" if r.get("safe") is None else f" ({r['safe']} safe)")
                                      for r in side[s]})) for s in SIDES}
        counts = {s: f"{side[s][0]['verified']:,} / {side[s][0]['mappings']:,}" for s in SIDES}
        each = {s: ", ".join(f"{r['seconds']:.1f}" for r in side[s]) for s in SIDES}
        lines.append(f"| {name} | {graphs['before']} / {graphs['after']} | {counts['before']} | {counts['after']} | "
                     f"{med['before']:.2f} ({each['before']}) | {med['after']:.2f} ({each['after']}) | "
                     f"{med['before'] / med['after']:.1f}x |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
