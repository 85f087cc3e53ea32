"""The paper's three search tables (§7.3-7.5), measured here, reported beside the paper's numbers.

A command line over `prism.bench` (see prism/bench/search.py for what is measured):
  1. search time per workload: Prism's symbolic search and the Mirage-style concrete mode per config;
  2. unique graphs found;
  3. the imap/fmap/omap ablation on RMSNorm (n=8, d=4096).
On a machine with a CUDA GPU (or with --gpu) the kernel times of prism/bench/gpu.py are added.

Every measurement is saved to DIR/results.json as it is made; rerunning with the same DIR measures only
what is missing (a flat records file written by the old --json option can be copied there). Then
DIR/report.md and its PNG plots are written, and the report is printed.

    python benchmarks/search_tables.py [--out DIR] [--workloads rmsnorm,...] [--mirage-limit 300] [--skip-mirage]
    python benchmarks/search_tables.py --out DIR --report-only   (rewrite the report, measure nothing)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import prism.bench as bench  # noqa: E402
from prism.errors import PrismError  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench_out"),
                    help="folder for results.json, report.md and the plots (default %(default)s)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from DIR/results.json")
    ap.add_argument("--workloads", default="", help="comma-separated workload names (default: all five)")
    ap.add_argument("--time-limit", type=float, default=3600.0, help="seconds per symbolic search")
    ap.add_argument("--mirage-limit", type=float, default=300.0, help="seconds per Mirage-style search")
    ap.add_argument("--ablation-limit", type=float, default=1800.0, help="seconds per ablation search")
    ap.add_argument("--skip-mirage", action="store_true")
    ap.add_argument("--skip-ablation", action="store_true")
    ap.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=None,
                    help="time the kernels too (default: when a CUDA GPU is visible)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.report_only:
            files = bench.write_report(bench.load_results(args.out / "results.json"), args.out)
        else:
            files = bench.run(args.out, workloads=[n for n in args.workloads.split(",") if n] or None,
                              mirage=not args.skip_mirage, mirage_limit=args.mirage_limit,
                              ablation=not args.skip_ablation, ablation_limit=args.ablation_limit,
                              time_limit=args.time_limit, gpu=args.gpu, workers=args.workers,
                              progress=lambda line: print(line, flush=True),
                              command=shlex.join(["python", *sys.argv]))["files"]
    except PrismError as e:
        print(f"search_tables: {e}", file=sys.stderr)
        return 2
    report = next(f for f in files if f.name == "report.md")
    print(report.read_text())
    print("wrote " + ", ".join(map(str, files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
