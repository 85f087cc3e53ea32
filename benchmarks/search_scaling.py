"""Search throughput (checks/s) against workers, for the local process pool and for Ray, and a simulated
many-node Ray cluster that shows how the checks split across its nodes.

Run: PYTHONPATH=. python benchmarks/search_scaling.py [--workload attention] [--workers 1,2] [--nodes 4]
         [--runs 3] [--out benchmarks/results/search_scaling_WORKLOAD]
Writes OUT.json (every run) and OUT.md (medians, and the last cluster run's split by node).

A check is one candidate (a structure and a mapping, mappings that differ only in a loop-free block's loop
range counted once) through the prefilter and, if it passes, the e-graph and the numeric cross-check;
checks/s is the search's candidates over its check phase's wall time. Each run is a
process of its own, because workers keep what they learn about a program (prefilter runs, verdicts) for
later searches: a second search of the same program in one process would check from those caches. Before
the timed search each run searches a smaller program (RMSNorm) on the same workers, so that starting them
(each imports torch and egglog, seconds) is not timed. The cluster is `ray.cluster_utils.Cluster`: a head
node with no CPUs (the driver) and --nodes nodes of one CPU each, all on this machine, so its throughput is
bounded by this machine's cores; what it shows is how the tasks spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

LOG = "PRISM_SCALING_LOG"
"""Environment variable: the file each cluster task appends its node, kind, candidates and seconds to."""


def _logged(kind: str, fn: Any, args: tuple) -> Any:
    """Run one search task and append where it ran (node id), what and how long to the log file."""
    import ray

    t0 = time.perf_counter()
    out = fn(*args)
    line = json.dumps({"node": ray.get_runtime_context().get_node_id(), "kind": kind,
                       "candidates": len(args[-1]), "seconds": time.perf_counter() - t0})
    with open(os.environ[LOG], "a") as f:
        f.write(line + "\n")
    return out


def prefilter_task(*args: Any) -> Any:
    """The search's prefilter task, logged (put in place of the driver's in the cluster run)."""
    from prism.search import parallel

    return _logged("prefilter", parallel.prefilter_task, args)


def verify_task(*args: Any) -> Any:
    """The search's verification task, logged (put in place of the driver's in the cluster run)."""
    from prism.search import parallel

    return _logged("verify", parallel.verify_task, args)


def _child(backend: str, n: int, workload: str) -> dict[str, Any]:
    """One run: warm the workers on RMSNorm, then time the search of `workload` (config 1)."""
    import prism.workloads as wl
    from prism.search import search

    cluster, opts = None, {"workers": n}
    if backend == "ray":
        opts = {"backend": "ray", "workers": n}
    elif backend == "cluster":
        from ray.cluster_utils import Cluster

        from prism.search import driver

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        for _ in range(n):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        opts = {"backend": "ray", "ray_address": cluster.address}
        driver.prefilter_task, driver.verify_task = prefilter_task, verify_task
    warm = wl.get("rmsnorm")
    search(warm.build(warm.configs[0]), **opts)
    if cluster is not None:
        Path(os.environ[LOG]).write_text("")
    w = wl.get(workload)
    r = search(w.build(w.configs[0]), **opts)
    s = r.stats
    rec = {"backend": backend, "workers": n, "workload": workload, "graphs": len(r), "seconds": s["seconds"],
           "generate_s": s["generate"]["seconds"], "instantiate_s": s["instantiate"]["seconds"],
           "check_s": s["check_wall_seconds"], "checks": s["instantiate"]["candidates"],
           "mappings": s["instantiate"]["mappings"],
           "verified": s["verify"]["verified"], "cluster_cpus": s["workers"]}
    if cluster is not None:
        import ray

        names = {nd["NodeID"]: f"node {i}" for i, nd in enumerate(
            sorted((nd for nd in ray.nodes() if nd["Resources"].get("CPU")), key=lambda nd: nd["NodeID"]), 1)}
        split: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for line in Path(os.environ[LOG]).read_text().splitlines():
            t = json.loads(line)
            row = split[names.get(t["node"], t["node"])]
            row[f"{t['kind']}_tasks"] += 1
            row[f"{t['kind']}_candidates"] += t["candidates"]
            row["busy_s"] += t["seconds"]
        rec["split"] = {k: dict(v) for k, v in sorted(split.items())}
        ray.shutdown()
        cluster.shutdown()
    return rec


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _markdown(runs: list[dict], workload: str) -> str:
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in runs:
        groups[(r["backend"], r["workers"])].append(r)
    out = [f"Workload {workload} (config 1): {runs[0]['checks']} checks ({runs[0]['mappings']} mappings), "
           f"{runs[0]['graphs']} graphs. Medians of {max(len(g) for g in groups.values())} runs.", "",
           "| backend | workers | checks/s | check s | generate s | search s | graphs |",
           "|---|---|---|---|---|---|---|"]
    for (backend, n), g in groups.items():
        out.append(f"| {backend} | {n} | {statistics.median(r['checks'] / r['check_s'] for r in g):.0f} | "
                   f"{_median(g, 'check_s'):.2f} | {_median(g, 'generate_s'):.2f} | {_median(g, 'seconds'):.2f} | "
                   f"{'/'.join(sorted({str(r['graphs']) for r in g}))} |")
    last = [r for r in runs if "split" in r]
    if last:
        split = last[-1]["split"]
        out += ["", f"Simulated cluster, last run ({len(split)} one-CPU nodes): how the tasks split.", "",
                "| node | prefilter tasks | prefilter candidates | verify tasks | verify candidates | busy s |",
                "|---|---|---|---|---|---|"]
        for node, row in split.items():
            out.append(f"| {node} | {row.get('prefilter_tasks', 0):.0f} | {row.get('prefilter_candidates', 0):.0f} | "
                       f"{row.get('verify_tasks', 0):.0f} | {row.get('verify_candidates', 0):.0f} | "
                       f"{row.get('busy_s', 0):.2f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="attention")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts (default %(default)s)")
    ap.add_argument("--nodes", type=int, default=4, help="one-CPU nodes of the simulated cluster (0: none)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="output path without suffix (default benchmarks/results/search_scaling_WORKLOAD)")
    ap.add_argument("--child", nargs=2, metavar=("BACKEND", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), args.workload)))
        return
    plan = [(b, int(n)) for n in args.workers.split(",") for b in ("pool", "ray")]
    plan += [("cluster", args.nodes)] if args.nodes else []
    out = Path(args.out or f"benchmarks/results/search_scaling_{args.workload}")
    out.parent.mkdir(parents=True, exist_ok=True)
    env = os.environ | {LOG: str(out.with_suffix(".tasks.log"))}
    runs = []
    for k in range(args.runs):  # the runs of every setting interleaved, so that load on the machine hits all alike
        for backend, n in plan:
            p = subprocess.run([sys.executable, __file__, "--workload", args.workload, "--child", backend, str(n)],
                               capture_output=True, text=True, env=env, check=True)
            rec = json.loads(p.stdout.strip().splitlines()[-1]) | {"run": k}
            runs.append(rec)
            print(f"run {k}: {backend} x{n}: {rec['checks'] / rec['check_s']:.0f} checks/s, "
                  f"check {rec['check_s']:.2f} s, search {rec['seconds']:.2f} s, {rec['graphs']} graphs",
                  file=sys.stderr)
            out.with_suffix(".json").write_text(json.dumps(runs, indent=1))
    out.with_suffix(".tasks.log").unlink(missing_ok=True)
    out.with_suffix(".md").write_text(_markdown(runs, args.workload))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
