"""How well the tuner's ranking by sample and climbing (prism.tune.rank.climb) finds the cost model's best points,
against ranking every tiling and against the uniform sample of RANK_LIMIT tilings it replaced.

    python benchmarks/rank_climb.py [--search-dir gpu-searches] [--workloads attention,qk_attention]
        [--out benchmarks/results/rank_climb.json]

Every config of every workload (the configs gpu_bench tunes), from its search at the small config (read from
--search-dir when saved there by this build, else searched and saved). One process, no workers: the seconds are
this process's CPU time. Per config and way of ranking: the tilings ranked, the best estimate (µs) and its ratio
to the whole ranking's, and the top-16 gap: the mean over k ≤ 16 of the k-th best distinct tiling's estimate
over the whole ranking's k-th (1.00: the same estimates as the 16 best of the whole space). On a GPU the tuner
times the model's best few, so the gap says whether the candidates it would time are as good.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prism import workloads as wl  # noqa: E402
from prism.bench.gpu import GPUOptions, search_result  # noqa: E402
from prism.options import RANK_LIMIT, RANK_SAMPLE  # noqa: E402
from prism.tune.rank import climb, rank  # noqa: E402
from prism.tune.space import Space  # noqa: E402
from prism.tune.target import H100  # noqa: E402

TOP = 16


def _distinct(rows: list, k: int = TOP) -> list[float]:
    """The estimates of the k best distinct tilings (each at its best launch)."""
    seen: dict[tuple, float] = {}
    for r in rows:
        seen.setdefault((r.candidate.graph, r.candidate.grid, r.candidate.loop), r.seconds)
        if len(seen) == k:
            break
    return list(seen.values())


def _timed(fn) -> tuple[list, int, float]:
    t0 = time.process_time()
    rows, n = fn()
    return rows, n, time.process_time() - t0


def measure(name: str, cfg: dict, result) -> dict:
    space = Space(result, wl.get(name).build(cfg, "float16"), H100)
    tilings = [(gs.index, grid, loop) for gs, grid, loop in space.tilings()]
    uniform = tilings if len(tilings) <= RANK_LIMIT else \
        [tilings[i] for i in sorted(random.Random(0).sample(range(len(tilings)), RANK_LIMIT))]
    ways = {"whole": lambda: (rank(space, tilings, H100)[0], len(tilings)),
            "climb": lambda: (lambda r: (r[0], r[2]))(climb(space, tilings, RANK_SAMPLE, RANK_LIMIT, 0, H100)),
            "uniform": lambda: (rank(space, uniform, H100)[0], len(uniform))}
    row: dict = {"workload": name, "config": cfg, "tilings": len(tilings)}
    best = None
    for way, fn in ways.items():
        rows, n, seconds = _timed(fn)
        top = _distinct(rows)
        best = best or top
        row[way] = {"ranked": n, "cpu_s": round(seconds, 2), "best_us": top[0] * 1e6,
                    "best_ratio": top[0] / best[0],
                    "top16_gap": statistics.mean(a / b for a, b in zip(top, best))}
    return row


def table(rows: list[dict]) -> str:
    lines = ["| workload | config | tilings | whole: best µs, CPU s | climb: tilings, best ×, top-16 gap, CPU s | "
             "uniform 4096: best ×, top-16 gap, CPU s |", "|---|---|---|---|---|---|"]
    for r in rows:
        w, c, u = r["whole"], r["climb"], r["uniform"]
        cfg = ",".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"| {r['workload']} | {cfg} | {r['tilings']} | {w['best_us']:.2f}, {w['cpu_s']:.1f} | "
                     f"{c['ranked']}, {c['best_ratio']:.3f}, {c['top16_gap']:.3f}, {c['cpu_s']:.1f} | "
                     f"{u['best_ratio']:.3f}, {u['top16_gap']:.3f}, {u['cpu_s']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search-dir", default="gpu-searches")
    ap.add_argument("--workloads", default="", help="comma-separated (default: all)")
    ap.add_argument("--out", default="benchmarks/results/rank_climb.json")
    args = ap.parse_args()
    names = [n for n in args.workloads.split(",") if n] or wl.names()
    opts = GPUOptions(search_dir=args.search_dir)
    rows = []
    for name in names:
        result = search_result(name, opts)
        for cfg in wl.get(name).configs:
            rows.append(measure(name, cfg, result))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            Path(args.out).write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
