"""Tuning time of two Prism source trees side by side (before and after a change), phase by phase.

Run: python benchmarks/tune_compare.py OLD_TREE NEW_TREE --search-dir DIR [--jobs attention:1,...] [--runs 1]
         [--workers 2] [--out benchmarks/results/tune_compare]
Writes OUT.json (every run) and OUT.md (medians per job and tree).

A job is WORKLOAD:CONFIG; both trees tune the same saved search result, DIR/WORKLOAD.json (`prism search
WORKLOAD --out DIR/WORKLOAD.json`, by either tree: what both read), with `prism.tune.tune` as `prism tune`
calls it (budget 16, no GPU: the cost model ranks, candidates compile for sm_90), in a fresh process per
run and an empty Triton cache (what a first tuning costs), alternating trees (benchmarks/trees.py). The
table gives the seconds per phase (`Report.seconds`) and the choice, which a speed-up must not change, and of the
fused candidates compiled for sm_90 how many have a stack frame (registers spilled), with the largest.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from trees import SIDES, side_by_side

from prism.bench.pages import frames_text

CHILD = """
import json, sys
import prism.workloads as wl
from prism.search.result import SearchResult
from prism.tune import tune
name, k, path, workers = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
w = wl.get(name)
r = tune(SearchResult.load(path), w.build(w.configs[k]), workers=workers).report
frames = [max(kn.get("frame") or 0 for kn in e.kernels) for e in r.entries if e.candidate.graph >= 0 and e.kernels]
print(json.dumps({"seconds": r.seconds, "chosen": r.best.label, "estimate_us": r.best.estimate_us,
                  "points": r.space.get("points"), "frames": frames}))
"""

JOBS = "attention:0,attention:1,qk_attention:0,qk_attention:1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--search-dir", required=True, help="folder of WORKLOAD.json search results")
    ap.add_argument("--jobs", default=JOBS, help="WORKLOAD:CONFIG,... (config: an index)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/tune_compare")
    args = ap.parse_args()
    out = Path(args.out)
    jobs = [tuple(j.split(":")) for j in args.jobs.split(",")]
    search_dir = Path(args.search_dir).resolve()
    runs = side_by_side(CHILD, args.old, args.new,
                        [(f"{n}:{k}", [n, k, str(search_dir / f"{n}.json"), str(args.workers)]) for n, k in jobs],
                        args.runs, out, lambda r: f"{r['seconds']['total']:.1f} s, {r['chosen']}",
                        fresh_triton_cache=True)
    lines = [f"Medians of {args.runs} run(s), {args.workers} workers, an empty Triton cache each; seconds per phase "
             "(space, rank, compile) and in all.", "",
             "| job | points | seconds before (space / rank / compile) | seconds after (space / rank / compile) | "
             "speedup | chosen before | chosen after | stack frames before | stack frames after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in (f"{n}:{k}" for n, k in jobs):
        side = {s: [r for r in runs if r["job"] == name and r["side"] == s] for s in SIDES}
        med = {s: {p: statistics.median(r["seconds"].get(p, 0.0) for r in side[s])
                   for p in ("space", "rank", "compile", "total")} for s in SIDES}
        text = {s: f"{med[s]['total']:.1f} ({med[s]['space']:.1f} / {med[s]['rank']:.1f} / {med[s]['compile']:.1f})"
                for s in SIDES}
        chosen = {s: "; ".join(sorted({f"{r['chosen']} ({r['estimate_us']:.2f} µs)" for r in side[s]})) for s in SIDES}
        lines.append(f"| {name} | {side['after'][0]['points']:,} | {text['before']} | {text['after']} | "
                     f"{med['before']['total'] / med['after']['total']:.1f}x | {chosen['before']} | {chosen['after']} | "
                     f"{frames_text(side['before'])} | {frames_text(side['after'])} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
