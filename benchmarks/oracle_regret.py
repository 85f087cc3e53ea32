"""The tuner's cost model against the oracle (prism.tune.oracle): per config measured on a GPU, the measured
µs of the model's first choice over the fastest measured candidate (regret; 1.00 is the best pick), and
Spearman's ρ of the model against the measurements, with the shipped calibration and with the data sheet.
Needs no GPU: the measurements are stored.

    python benchmarks/oracle_regret.py [FILES ...]     # default: benchmarks/results/tune_samples_*.json
        [--left-out]     # add each config's regret when the calibration is fitted on the other configs only
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout that is not installed
    sys.path.insert(0, str(ROOT))

from prism.tune.oracle import left_out, load, regrets  # noqa: E402
from prism.tune.target import TARGETS, get_target  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="files written by tune_calibrate.py collect")
    ap.add_argument("--kind", default="h100", help="the GPU kind they were measured on")
    ap.add_argument("--left-out", action="store_true", help="also fit on all configs but one, per config")
    args = ap.parse_args()
    files = args.files or sorted((ROOT / "benchmarks" / "results").glob(f"tune_samples_{args.kind}_*.json"))
    samples = load(files)
    calibrated, sheet = regrets(samples, get_target(args.kind)), regrets(samples, TARGETS[args.kind])
    print(f"{len(samples)} measured candidates in {len(files)} file(s); the model's pick per config")
    print("| config | candidates | regret | ρ | regret, data sheet | ρ, data sheet | picked | fastest |")
    print("|---|---|---|---|---|---|---|---|")
    for c, d in zip(calibrated, sheet):
        print(f"| {c.group} | {c.candidates} | {c.regret:.2f} | {c.rho:.2f} | {d.regret:.2f} | {d.rho:.2f} | "
              f"{c.picked} | {c.best} |")
    worst = max(calibrated, key=lambda r: r.regret)
    print(f"configs within 1.10: {sum(r.regret <= 1.10 for r in calibrated)} of {len(calibrated)}; geomean "
          f"{statistics.geometric_mean([r.regret for r in calibrated]):.2f}, worst {worst.regret:.2f} ({worst.group})")
    if args.left_out:
        print("\nfitted on the other configs (from the data sheet), each config left out in turn:")
        print("| config | regret | ρ | picked |")
        print("|---|---|---|---|")
        out = left_out(samples, TARGETS[args.kind])
        for r in out:
            print(f"| {r.group} | {r.regret:.2f} | {r.rho:.2f} | {r.picked} |")
        print(f"left out: configs within 1.10: {sum(r.regret <= 1.10 for r in out)} of {len(out)}; geomean "
              f"{statistics.geometric_mean([r.regret for r in out]):.2f}, worst {max(r.regret for r in out):.2f}")


if __name__ == "__main__":
    main()
