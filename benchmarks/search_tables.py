"""The paper's three search tables (§7.3-7.5), measured here, printed beside the paper's numbers.

  1. search time per workload: Prism's symbolic search (once per workload, at config 1's shapes)
     and the fully concrete Mirage-style mode (maps, grid sizes and loop ranges enumerated during the
     search, per config; "x" when it hits its time limit, as in the paper);
  2. unique graphs found (structure + maps; sizes do not count);
  3. the ablation on RMSNorm (n=8, d=4096): imap/fmap/omap symbolic (S) or concrete (C).

The paper ran on 96 threads; this prints the machine's core count. Every search here uses the
default limits, the real verifier (prism.verify.equivalent) and the numeric cross-check. Worker
processes are started once, before the first timed search (starting them costs seconds: torch and
egglog imports), and reused, so the times are search times.

    python benchmarks/search_tables.py [--workloads rmsnorm,...] [--mirage-limit 300] [--skip-mirage]
                                       [--json results.json]   (saved per run; rerun to resume)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import prism.workloads as wl  # noqa: E402
from prism.search import search  # noqa: E402
from prism.search.parallel import Workers  # noqa: E402

PAPER_TIME = {"rmsnorm": ("11.6", "13.0", "0.3"), "rmsnorm_mlp": ("3600x", "3600x", "871"),
              "swiglu": ("45.6", "27.0", "1.0"), "attention": ("42.4", "10.0", "41"),
              "qk_attention": ("154.5", "10.1", "42")}
PAPER_GRAPHS = {"rmsnorm": (1, 8, 9), "rmsnorm_mlp": (12, 14, 23), "swiglu": (1, 1, 12), "attention": (4, 3, 14),
                "qk_attention": (4, 4, 14)}
PAPER_ABLATION = {"SSS": 0.3, "SSC": 2.5, "SCS": 5.5, "CSS": 20.5, "SCC": 5.5, "CSC": 22.5, "CCC": 312}
NAMES = {"rmsnorm": "RMSNorm", "rmsnorm_mlp": "RMSNorm-MLP", "swiglu": "SwiGLU", "attention": "Attention",
         "qk_attention": "QK-Attention"}


DONE: dict[str, dict] = {}
"""Measurements already made (loaded from --json when resuming), by run key."""
OUT: Path | None = None


def run(name: str, cfg: dict, modes: str, limit: float, workers: int | None) -> dict:
    key = json.dumps([name, cfg, modes, limit])
    if key in DONE:
        return DONE[key]
    w = wl.get(name)
    t0 = time.perf_counter()
    r = search(w.build(cfg), modes=modes, time_limit=limit, workers=workers)
    s = r.stats
    rec = {"workload": name, "cfg": cfg, "modes": modes, "seconds": time.perf_counter() - t0,
            "graphs": len(r), "timed_out": s["timed_out"], "states": s["generate"].get("states", 0),
            "structures": s["generate"]["structures"], "mappings": s["instantiate"]["mappings"],
            "verified": s["verify"]["verified"], "unsound": s["cross_check"]["unsound"],
            "generate_s": s["generate"]["seconds"], "check_s": s["check_wall_seconds"]}
    print(f"  [{modes:>6}] {name:<13} {json.dumps(cfg)}: {fmt_time(rec)} s, {rec['graphs']} graphs, "
          f"{rec['states']} states, {rec['structures']} structures, {rec['mappings']} mappings, "
          f"{rec['verified']} verified, {rec['unsound']} unsound", flush=True)
    DONE[key] = rec
    if OUT is not None:  # save after every run, so an interrupted benchmark resumes where it stopped
        OUT.write_text(json.dumps(DONE, indent=1))
    return rec


def fmt_time(rec: dict) -> str:
    return f"{rec['seconds']:.0f}x" if rec["timed_out"] else f"{rec['seconds']:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(wl.names()))
    ap.add_argument("--time-limit", type=float, default=3600.0, help="seconds per symbolic search")
    ap.add_argument("--mirage-limit", type=float, default=300.0, help="seconds per Mirage-style search")
    ap.add_argument("--ablation-limit", type=float, default=1800.0, help="seconds per ablation search")
    ap.add_argument("--skip-mirage", action="store_true")
    ap.add_argument("--skip-ablation", action="store_true")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    ap.add_argument("--json", type=Path, default=None,
                    help="write every measurement here as it is made; rerunning reuses what it holds")
    args = ap.parse_args()
    global OUT
    OUT = args.json
    if OUT is not None and OUT.exists():
        DONE.update(json.loads(OUT.read_text()))
    names = args.workloads.split(",")
    workers = Workers(args.workers)
    workers.start()  # spawn the worker processes now, untimed
    print(f"Prism search tables on {os.cpu_count()} cores ({workers.n} worker processes); paper: 96 threads")
    records = []

    sym = {n: run(n, wl.get(n).configs[0], "SSS", args.time_limit, args.workers) for n in names}
    records += sym.values()
    mirage = {}
    if not args.skip_mirage:
        for n in names:
            mirage[n] = [run(n, cfg, "mirage", args.mirage_limit, args.workers) for cfg in wl.get(n).configs]
            records += mirage[n]

    print("\nSearch time (paper §7.3, seconds; 'x' = still running at the time limit)")
    print(f"{'workload':<14}| {'paper Mirage c1':>15} {'c2':>7} {'paper Prism':>11} | "
          f"{'ours Mirage-style c1':>20} {'c2':>7} {'ours Prism':>10}")
    for n in names:
        pm1, pm2, pp = PAPER_TIME[n]
        m1, m2 = (fmt_time(r) for r in mirage[n]) if n in mirage else ("-", "-")
        print(f"{NAMES[n]:<14}| {pm1:>15} {pm2:>7} {pp:>11} | {m1:>20} {m2:>7} {fmt_time(sym[n]):>10}")

    print("\nUnique graphs (paper §7.4: structure + maps; sizes do not count)")
    print(f"{'workload':<14}| {'paper Mirage c1':>15} {'c2':>7} {'paper Prism':>11} | "
          f"{'ours Mirage-style c1':>20} {'c2':>7} {'ours Prism':>10}")
    for n in names:
        pm1, pm2, pp = PAPER_GRAPHS[n]
        m1, m2 = (f"{r['graphs']}{'*' if r['timed_out'] else ''}" for r in mirage[n]) if n in mirage else ("-", "-")
        print(f"{NAMES[n]:<14}| {pm1:>15} {pm2:>7} {pp:>11} | {m1:>20} {m2:>7} {sym[n]['graphs']:>10}")
    if mirage:
        print("(* found before the time limit)")

    if not args.skip_ablation:
        cfg = {"n": 8, "d": 4096}
        print("\nAblation (paper §7.5) on RMSNorm n=8 d=4096: search seconds; S = symbolic, C = concrete")
        print(f"{'imap fmap omap':<15}| {'paper':>7} | {'ours':>8} {'states':>10} {'structures':>11} {'graphs':>7}")
        for modes in PAPER_ABLATION:
            rec = run("rmsnorm", cfg, modes, args.ablation_limit, args.workers)
            records.append(rec)
            print(f"{'    '.join(modes):<15}| {PAPER_ABLATION[modes]:>7} | {fmt_time(rec):>8} {rec['states']:>10} "
                  f"{rec['structures']:>11} {rec['graphs']:>7}", flush=True)

    unsound = sum(r["unsound"] for r in records)
    print(f"\nunsound-axiom events over all searches: {unsound}")


if __name__ == "__main__":
    main()
