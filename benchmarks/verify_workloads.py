"""Verification speed per workload: prism.verify.equivalent on each hand-written fused µGraph and its mutants.

Run: python benchmarks/verify_workloads.py [--repeat 20]

Proven pairs stop as soon as both sides meet; wrong candidates run to saturation or a cap, so they set
the worst case. A search checks thousands of candidates, so the median per check is the figure to watch.
"""

from __future__ import annotations

import argparse
import statistics
import time

from prism import verify, workloads
from prism.verify.fuzz import mutants


def _timed(ref, cand) -> tuple[float, bool]:
    start = time.perf_counter()
    verdict = verify.equivalent(ref, cand)
    return (time.perf_counter() - start) * 1e3, verdict.equal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="checks of the fused graph per workload")
    args = parser.parse_args()
    print(f"{'workload':<14} {'fused: median ms':>16} {'max ms':>8} {'mutants':>8} {'rejected':>9} "
          f"{'median ms':>10} {'all checks/s':>13}")
    for name in workloads.names():
        w = workloads.get(name)
        cfg = w.configs[0]
        ref, fused = w.build(cfg), w.fused(cfg)
        good = [_timed(ref, fused) for _ in range(args.repeat)]
        assert all(eq for _, eq in good), f"{name}: fused graph not proven"
        bad = [_timed(ref, m) for _, m in mutants(fused)]
        every = [ms for ms, _ in good + bad]
        print(f"{name:<14} {statistics.median(ms for ms, _ in good):>16.2f} {max(ms for ms, _ in good):>8.2f} "
              f"{len(bad):>8} {sum(not eq for _, eq in bad):>9} {statistics.median(ms for ms, _ in bad):>10.2f} "
              f"{len(every) / (sum(every) / 1e3):>13.0f}")


if __name__ == "__main__":
    main()
