"""A whole GPU run in one command: what a session lent a GPU for minutes should run, searched beforehand on a CPU.

    # on a CPU, beforehand (minutes): every workload's search, saved for this build of Prism; carry the folder
    python benchmarks/gpu_run.py prepare --search-dir gpu-searches
    # on the GPU, in one device call (about 10 minutes): the GPU tests, gpu_bench on every config, the oracle
    python benchmarks/gpu_run.py run --search-dir gpu-searches --out $OUT

`run` does, each step in a process of its own under a time limit (one that fails or runs out is reported,
and the others still run):
  1. the tests that need a GPU (those that skip without one), on 12 workers;
  2. `benchmarks/gpu_bench.py` on all ten configs with the carried searches (Prism's kernels, eager and
     torch.compile, as called and in CUDA graphs, the DRAM floor), into OUT/gpu_bench.json;
  3. `benchmarks/tune_calibrate.py collect`: measured candidates per config, into OUT/tune_samples.json, and the
     current cost model's regret on them (prism.tune.oracle). Copy that file to
     benchmarks/results/tune_samples_<gpu>_<date>.json: the oracle the CPU tests replay (tests/tune/test_oracle.py).
It prints each step's last lines and a summary table last. Without a GPU, `run` says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (HERE, ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

GPU_TESTS = ["tests/runtime/test_gpu.py", "tests/tune/test_gpu_bench.py", "tests/runtime/test_superoptimize.py",
             "tests/capture/test_backend.py", "tests/bench/test_bench.py", "tests/test_readme.py"]
"""The test files holding tests that skip without a GPU (tests/bench/test_gpu_run.py checks the list)."""
LIMITS = {"GPU tests": 140, "gpu_bench": 270, "oracle samples": 130}
"""Seconds per step: together under a device call's 10 minutes, with room to start."""


def prepare(search_dir: str, time_limit: float) -> int:
    """Search every workload at its small config (what gpu_bench and collect tune) and save it in `search_dir`."""
    from prism import workloads
    from prism.bench.gpu import GPUOptions, search_result

    Path(search_dir).mkdir(parents=True, exist_ok=True)
    opts = GPUOptions(search_dir=search_dir, search_time_limit=time_limit)
    for name in workloads.names():
        t0 = time.perf_counter()
        result = search_result(name, opts)
        print(f"{name}: {len(result.graphs)} graphs, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(f"searches saved in {search_dir}: carry it to the GPU machine with this tree")
    return 0


def step(name: str, argv: Sequence[str], timeout: float, log: Path) -> tuple[str, str]:
    """Run one step (a command line) under `timeout` seconds, its output in `log`: (status, its last lines)."""
    t0 = time.perf_counter()
    try:
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                           env=os.environ | {"PYTHONPATH": path})
        out, status = p.stdout + p.stderr, "ok" if p.returncode == 0 else f"exit {p.returncode}"
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = f"stopped at {timeout:.0f} s"
    log.write_text(out)
    tail = "\n".join(out.strip().splitlines()[-15:])
    print(f"== {name}: {status} in {time.perf_counter() - t0:.0f} s\n{tail}\n", flush=True)
    return status, tail


def run(search_dir: str, out: str, budget: int) -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_run: run needs a CUDA GPU (this machine has none); nothing measured", file=sys.stderr)
        return 2
    if not glob.glob(f"{search_dir}/*.json"):
        print(f"gpu_run: no saved searches in {search_dir} (run `gpu_run.py prepare` on a CPU first)", file=sys.stderr)
        return 2
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    steps = {
        "GPU tests": [py, "-m", "pytest", "-q", "-n", "12", "-p", "no:cacheprovider", *GPU_TESTS],
        "gpu_bench": [py, "benchmarks/gpu_bench.py", "--search-dir", search_dir, "--budget", str(budget),
                      "--out", str(folder / "gpu_bench.json")],
        "oracle samples": [py, "benchmarks/tune_calibrate.py", "collect", "--search-dir", search_dir,
                           "--out", str(folder / "tune_samples.json")],
    }
    summary = [(name, *step(name, argv, LIMITS[name], folder / f"{name.replace(' ', '_')}.log"))
               for name, argv in steps.items()]
    samples = folder / "tune_samples.json"
    if samples.exists():
        from prism.tune.oracle import load, regrets
        from prism.tune.target import get_target

        rows = regrets(load([samples]), get_target(torch.cuda.get_device_name()))   # the calibration shipped
        print("| config | candidates | regret | ρ |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r.group} | {r.candidates} | {r.regret:.2f} | {'' if r.rho is None else f'{r.rho:.2f}'} |")
    print("| step | status |\n|---|---|")
    for name, status, _ in summary:
        print(f"| {name} | {status} |")
    return 0 if all(status == "ok" for _, status, _ in summary) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="on a CPU: every workload's search, saved")
    p.add_argument("--search-dir", required=True)
    p.add_argument("--search-time-limit", type=float, default=900.0)
    r = sub.add_parser("run", help="on the GPU: tests, gpu_bench, oracle samples")
    r.add_argument("--search-dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget", type=int, default=16)
    args = ap.parse_args(argv)
    if args.step == "prepare":
        return prepare(args.search_dir, args.search_time_limit)
    return run(args.search_dir, args.out, args.budget)


if __name__ == "__main__":
    sys.exit(main())
