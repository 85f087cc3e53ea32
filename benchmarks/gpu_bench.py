"""GPU benchmark: Prism's chosen kernels vs torch eager vs torch.compile, as called and in CUDA graphs, next to
the DRAM floor.

A command line over `prism.bench.gpu` (see there for how each figure is measured). Run (needs a CUDA
GPU; refuses in one line without one):
    PYTHONPATH=. python benchmarks/gpu_bench.py [--out gpu_bench.json] [--budget 16] [--workloads rmsnorm,swiglu]

Writes every figure to JSON (after every row) and prints a markdown table. For the same figures in the
benchmark report, with plots: `prism bench --gpu`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from prism.bench.gpu import GPUOptions, GPUUnavailable, format_table, measure_gpu  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu_bench.json", help="JSON file for every figure (default %(default)s)")
    p.add_argument("--workloads", default="", help="comma-separated workload names (default: all)")
    p.add_argument("--budget", type=int, default=16, help="candidates superoptimize compiles and times")
    p.add_argument("--time-budget", type=float, default=None, help="seconds superoptimize may tune per config")
    p.add_argument("--search-dir", default="", help="folder of saved search results <workload>.json "
                   "(read if present, written otherwise)")
    p.add_argument("--search-time-limit", type=float, default=900.0, help="seconds per workload search")
    p.add_argument("--max-block-ops", type=int, default=None, help="search limit (default: the search's)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (it can take minutes)")
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the torch "
                   "formula (default %(default)s; its graph column is captured by hand)")
    p.add_argument("--no-cache", action="store_true", help="ignore Prism's result cache")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--oracle", default=str(ROOT / "benchmarks" / "results"), help="folder of stored measured "
                   "candidates (tune_samples_*.json): each config's fastest on this kind of GPU is always timed again "
                   "(default %(default)s; '' keeps none)")
    args = p.parse_args(argv)
    from prism import workloads

    names = [n for n in args.workloads.split(",") if n] or workloads.names()
    unknown = [n for n in names if n not in workloads.names()]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(workloads.names())}")
    args.names = names
    return args


def search_options(args: argparse.Namespace) -> GPUOptions:
    """GPUOptions from the search arguments (benchmarks/tune_calibrate.py takes the same ones)."""
    return GPUOptions(search_dir=args.search_dir or None, search_time_limit=args.search_time_limit,
                      max_block_ops=args.max_block_ops, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    opts = replace(search_options(args), budget=args.budget, time_budget=args.time_budget, warmup=args.warmup,
                   rep=args.rep, compile=not args.no_compile, compile_mode=args.compile_mode,
                   cache=not args.no_cache, oracle=args.oracle or None)

    def save(results: dict[str, Any]) -> None:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))

    try:
        results = measure_gpu(args.names, opts, save=save, progress=lambda line: print(line, file=sys.stderr,
                                                                                      flush=True))
    except GPUUnavailable as e:
        print(f"gpu_bench: {e}", file=sys.stderr)
        return 2
    save(results)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
