"""A whole GPU run in one command: what a session lent a GPU for minutes should run, searched beforehand on a CPU.

    # on a CPU, beforehand (minutes): every workload's search, saved for this build of Prism; carry the folder
    python benchmarks/gpu_run.py prepare --search-dir gpu-searches
    # on the GPU, in one device call (about 10 minutes): the GPU tests, gpu_bench on every config, the oracle
    python benchmarks/gpu_run.py run --search-dir gpu-searches --out $OUT

`run` does these steps, each in a process of its own under a time limit (one that fails or runs out is reported,
and the others still run); `--steps` picks some of them, in its order (default: the first three, which fit one
device call together; the others are for a second call):
  tests      the tests that need a GPU (those that skip without one), on 12 workers;
  gpu_bench  `benchmarks/gpu_bench.py` on all ten configs with the carried searches (Prism's kernels, eager and
             torch.compile, as called and in CUDA graphs, the DRAM floor), into OUT/gpu_bench.json;
  oracle     `benchmarks/tune_calibrate.py collect`: measured candidates per config, into OUT/tune_samples.json,
             and the current cost model's regret on them (prism.tune.oracle). Copy that file to
             benchmarks/results/tune_samples_<gpu>_<date>.json: the oracle the CPU tests replay
             (tests/tune/test_oracle.py);
  llama      `benchmarks/hf_decode.py --llama2048`: a Llama-shaped float16 decode step (2 layers, KV 1024,
             batch 1 and 8) through eager, Inductor, Inductor's reduce-overhead, Prism and Prism with CUDA
             graphs (needs `transformers`);
  decoder    `benchmarks/decoder_bench.py`: the example decoder layer through the same backends;
  sizes      `benchmarks/every_size.py`: decode attention at KV lengths that are not powers of two, into
             OUT/every_size.json.
It prints each step's last lines and a summary table last. Without a GPU, `run` says so in one line and exits 2.

    python benchmarks/gpu_run.py run --search-dir gpu-searches --out $OUT --steps tests,llama,decoder
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (HERE, ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

GPU_TESTS = ["tests/runtime/test_gpu.py", "tests/tune/test_gpu_bench.py", "tests/runtime/test_superoptimize.py",
             "tests/capture/test_backend.py", "tests/bench/test_bench.py", "tests/test_readme.py"]
"""The test files holding tests that skip without a GPU (tests/bench/test_gpu_run.py checks the list)."""


class Step(NamedTuple):
    """One step of `run`: its seconds at most, and its command line from (python, search folder, out folder,
    budget)."""

    limit: int
    argv: Callable[[str, str, Path, int], list[str]]


STEPS = {
    "tests": Step(140, lambda py, searches, out, budget: [py, "-m", "pytest", "-q", "-n", "12", "-p",
                                                          "no:cacheprovider", *GPU_TESTS]),
    "gpu_bench": Step(270, lambda py, searches, out, budget: [
        py, "benchmarks/gpu_bench.py", "--search-dir", searches, "--budget", str(budget),
        "--out", str(out / "gpu_bench.json")]),
    "oracle": Step(130, lambda py, searches, out, budget: [
        py, "benchmarks/tune_calibrate.py", "collect", "--search-dir", searches, "--out",
        str(out / "tune_samples.json")]),
    "llama": Step(240, lambda py, searches, out, budget: [
        py, "benchmarks/hf_decode.py", "--llama2048", "--layers", "2", "--repeat", "30", "--budget", "8"]),
    "decoder": Step(150, lambda py, searches, out, budget: [py, "benchmarks/decoder_bench.py", "--budget", "8"]),
    "sizes": Step(100, lambda py, searches, out, budget: [
        py, "benchmarks/every_size.py", "--budget", "8", "--out", str(out / "every_size.json")]),
}
"""Every step `run` can take, by the name `--steps` gives it."""
DEFAULT_STEPS = ("tests", "gpu_bench", "oracle")
CALL_SECONDS = 600 - 60
"""What a device call leaves the steps: its 10 minutes, less a minute to install the carried wheels and start."""


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
    """Run one step (a command line) under `timeout` seconds, its output in `log`: (status, its last lines).
    A step that runs out is killed with every process it started (pytest's workers hold the GPU too)."""
    t0 = time.perf_counter()
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env=os.environ | {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        status = "ok" if p.returncode == 0 else f"exit {p.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        status = f"stopped at {timeout:.0f} s"
    log.write_text(out)
    tail = "\n".join(out.strip().splitlines()[-15:])
    print(f"== {name}: {status} in {time.perf_counter() - t0:.0f} s\n{tail}\n", flush=True)
    return status, tail


def run(search_dir: str, out: str, budget: int, steps: Sequence[str] = DEFAULT_STEPS) -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_run: run needs a CUDA GPU (this machine has none); nothing measured", file=sys.stderr)
        return 2
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        print(f"gpu_run: no step {', '.join(unknown)}; the steps are {', '.join(STEPS)}", file=sys.stderr)
        return 2
    if {"gpu_bench", "oracle"} & set(steps) and not glob.glob(f"{search_dir}/*.json"):
        print(f"gpu_run: no saved searches in {search_dir} (run `gpu_run.py prepare` on a CPU first)", file=sys.stderr)
        return 2
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    summary = [(name, *step(name, STEPS[name].argv(sys.executable, search_dir, folder, budget), STEPS[name].limit,
                            folder / f"{name}.log")) for name in steps]
    samples = folder / "tune_samples.json"
    if "oracle" in steps and samples.exists():
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
    r.add_argument("--budget", type=int, default=16, help="candidates gpu_bench tunes per config")
    r.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                   help=f"comma-separated, run in this order: {', '.join(STEPS)} (default %(default)s)")
    args = ap.parse_args(argv)
    if args.step == "prepare":
        return prepare(args.search_dir, args.search_time_limit)
    return run(args.search_dir, args.out, args.budget, [s for s in args.steps.split(",") if s])


if __name__ == "__main__":
    sys.exit(main())
