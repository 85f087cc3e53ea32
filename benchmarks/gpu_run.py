"""A whole GPU run in few commands: what a session lent a GPU for minutes should run, prepared on a CPU.

    # on a CPU with the package registry, beforehand (minutes): every workload's search, saved for this build
    # of Prism, and the wheels the GPU machine lacks (egglog's chain; transformers, its models but Llama left out)
    python benchmarks/gpu_run.py prepare --search-dir gpu-searches --wheels .whl
    # on the GPU, one device call per line (each fits 10 minutes; carry .whl and gpu-searches)
    python3 benchmarks/gpu_run.py run --wheels .whl --search-dir gpu-searches --out $OUT --steps gpu_bench
    python3 benchmarks/gpu_run.py run --wheels .whl --search-dir gpu-searches --out $OUT --steps tests,oracle
    python3 benchmarks/gpu_run.py run --wheels .whl --search-dir gpu-searches --out $OUT --steps llama
    python3 benchmarks/gpu_run.py run --wheels .whl --search-dir gpu-searches --out $OUT --steps decoder,sizes
    # TVM's column: `python benchmarks/tvm_bench.py prepare --out tvm-build` on the CPU first; carry tvm-build (with
    # .whl too the call would pass its 64 MiB; the tvm step needs no wheel)
    python3 benchmarks/gpu_run.py run --search-dir gpu-searches --out $OUT --steps tvm
    # anywhere, after: Prism's times against an earlier run on the same GPU kind (the goal "never slower")
    python benchmarks/gpu_run.py compare NEW/gpu_bench.json --before benchmarks/results/gpu_bench_h200_*_c.json

`run` installs the carried wheels (`--wheels`) where its steps import them, then does the steps `--steps` names,
in its order (default: gpu_bench), each in a process of its own under its time limit (one that fails or
runs out is reported, and killed with what it started; the others still run). `--workloads` (comma-separated)
narrows gpu_bench and oracle to those workloads:
  tests      the tests that need a GPU (those that skip without one), on 12 workers, a line per test (a run
             killed at its limit still names what failed: 2026-11-26's, at -q, did not);
  gpu_bench  `benchmarks/gpu_bench.py` on all ten configs with the carried searches (Prism's kernels, eager and
             torch.compile, as called and in CUDA graphs, the DRAM floor), into OUT/gpu_bench.json (written
             after every row, so a step that runs out keeps what it measured); then every candidate its tuner
             timed, as oracle samples (`tune_calibrate.py from-bench`), into OUT/tune_samples_bench.json. Keep
             both in benchmarks/results/ with the searches the run tuned (from-bench needs them again);
  oracle     `benchmarks/tune_calibrate.py collect`: measured candidates per config, into OUT/tune_samples.json,
             and the current cost model's regret on them (prism.tune.oracle). Copy that file to
             benchmarks/results/tune_samples_<gpu>_<date>.json: the oracle the CPU tests replay
             (tests/tune/test_oracle.py);
  llama      `benchmarks/hf_decode.py --llama2048 --batches 1 --pdl`: a Llama-shaped float16 decode step (2 layers,
             KV 1024) through eager, Inductor, Inductor's reduce-overhead, Prism and Prism with CUDA graphs (each
             also with programmatic dependent launch), launches per layer (Prism's and torch's), each
             Prism region's chosen kernel and µs, and each backend's kernels by device time into
             OUT/llama_kernels.md (where Prism's step loses to Inductor's, kernel by kernel);
  decoder    `benchmarks/decoder_bench.py`: the example decoder layer through the same backends, Prism's host
             and kernel profile into OUT/decoder_profile.txt;
  sizes      `benchmarks/every_size.py`: decode attention at KV lengths that are not powers of two, into
             OUT/every_size.json;
  tvm        `benchmarks/tvm_bench.py run --build tvm-build`: TVM's kernels of every config (built on the CPU by
             its `prepare`), checked against torch and timed as called and in CUDA graphs, into OUT/tvm.json
             (after gpu_bench in the same call, the table printed last holds TVM's columns).
On an H100 (2026-11-26) the gpu_bench step measured 7 configs in 270 s (17-41 s of tuning each, then torch.compile's
autotuning), then 8 in 430 s (18-70 s of tuning), the oracle step 3 configs in 130 s: gpu_bench wants a call of its
own. Tuning has since lost the second compile of every timed candidate (13-47 s a config in that run, 2-4 s
after). The other limits come from two H200 runs (2026-11-26): Prism's first compile of the Llama-shaped step took
332 s, then 209 s (the llama step 248 s in all) once compile workers ran each candidate (prism.tune.compile's
`warm`); the decoder step took 141 s, the GPU tests 208 s on 12 workers. On an H200 (2026-11-27) the gpu_bench step measured 13
configs in its 500 s (3-55 s of tuning each, then torch.compile's autotuning), and a second call the other six but
MoE in 230 s: all ten workloads want two calls. `--seconds` (default CALL_SECONDS) bounds the
steps together: a step gets at most what is left, so a call never runs past its limit with a step's output
lost. It prints each step's last lines and a summary table last. Without a GPU, `run` says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (HERE, ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

GPU_TESTS = ["tests/runtime/test_gpu.py", "tests/tune/test_gpu_bench.py", "tests/runtime/test_superoptimize.py",
             "tests/capture/test_backend.py", "tests/bench/test_bench.py", "tests/test_docs.py"]
"""The test files holding tests that skip without a GPU (tests/bench/test_gpu_run.py checks the list)."""


class Step(NamedTuple):
    """One step of `run`: its seconds at most, its command line from (python, search folder, out folder,
    budget), and whether it measures per workload (then `run --workloads` narrows it)."""

    limit: int
    argv: Callable[[str, str, Path, int], list[str]]
    per_workload: bool = False


STEPS = {
    "tests": Step(270, lambda py, searches, out, budget: [py, "-m", "pytest", "-v", "-n", "12", "-p",
                                                          "no:cacheprovider", *GPU_TESTS]),
    "gpu_bench": Step(500, lambda py, searches, out, budget: [
        py, "benchmarks/gpu_bench.py", "--search-dir", searches, "--budget", str(budget),
        "--out", str(out / "gpu_bench.json")], per_workload=True),
    "oracle": Step(250, lambda py, searches, out, budget: [
        py, "benchmarks/tune_calibrate.py", "collect", "--search-dir", searches, "--out",
        str(out / "tune_samples.json")], per_workload=True),
    "llama": Step(500, lambda py, searches, out, budget: [
        py, "benchmarks/hf_decode.py", "--llama2048", "--layers", "2", "--repeat", "30", "--budget", "8",
        "--batches", "1", "--pdl", "--kernels", str(out / "llama_kernels.md")]),
    "decoder": Step(330, lambda py, searches, out, budget: [py, "benchmarks/decoder_bench.py", "--budget", "8",
                                                            "--profile", str(out / "decoder_profile.txt")]),
    "sizes": Step(180, lambda py, searches, out, budget: [
        py, "benchmarks/every_size.py", "--budget", "8", "--out", str(out / "every_size.json")]),
    "tvm": Step(150, lambda py, searches, out, budget: [
        py, "benchmarks/tvm_bench.py", "run", "--build", TVM_BUILD, "--out", str(out / "tvm.json")]),
}
"""Every step `run` can take, by the name `--steps` gives it."""
DEFAULT_STEPS = ("gpu_bench",)
TVM_BUILD = "tvm-build"
"""Where the tvm step reads `tvm_bench.py prepare`'s libraries and TVM's runtime (carry it)."""
CALL_SECONDS = 600 - 60
"""What a device call leaves the steps: its 10 minutes, less a minute to install the carried wheels and start."""
MIN_SECONDS = 30
"""A step is not started with less of the call left (`run --seconds`)."""


WHEELS = ["egglog==13.2.0", "black==26.10.1", "opentelemetry-api==1.45.2", "platformdirs==4.14.7", "pytokens==0.4.1",
          "graphviz==0.21", "huggingface-hub==2.4.0", "httpx2==2.16.2", "httpcore2==2.16.2", "truststore==0.10.5",
          "tokenizers==0.23.3", "safetensors==0.8.0", "regex==2026.11.19", "click==8.5.1"]
"""What the GPU machine (Python 3.12, torch 2.11) lacks: egglog with what its package imports, and what
transformers 5 imports beyond what is there (httpcore2 imports truststore: a run without it lost its llama step)."""
TRANSFORMERS = "transformers==5.24.0"
KEPT_MODELS = ("auto", "llama")
"""transformers travels without its other models: whole, its wheel and egglog's pass a device call's 64 MiB."""
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64"]


def download_wheels(folder: str) -> int:
    """WHEELS for the GPU machine's Python into `folder`, and transformers as `transformers-slim.tgz` (the
    package with only KEPT_MODELS), which `run --wheels` unpacks beside them."""
    import tempfile
    import zipfile

    target = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
              *[x for p in PLATFORMS for x in ("--platform", p)]]
    Path(folder).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for specs, into in ((WHEELS, folder), ([TRANSFORMERS], tmp)):
            done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *target, "-d", into,
                                   *specs], capture_output=True, text=True)
            if done.returncode:
                print(f"gpu_run: pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                      file=sys.stderr)
                return 1
        (wheel,) = Path(tmp).glob("transformers-*.whl")
        with zipfile.ZipFile(wheel) as z, tarfile.open(Path(folder) / "transformers-slim.tgz", "w:gz") as tgz:
            z.extractall(tmp)
            models = Path(tmp) / "transformers" / "models"
            tgz.add(Path(tmp) / "transformers", "transformers", filter=lambda info: None if (
                info.name.startswith("transformers/models/") and info.name.count("/") >= 2
                and info.name.split("/")[2] not in KEPT_MODELS and (models / info.name.split("/")[2]).is_dir())
                else info)
    size = sum(f.stat().st_size for f in Path(folder).iterdir()) / 2**20
    print(f"wheels for the GPU machine in {folder} ({size:.0f} MiB): carry it, and run with --wheels {folder}")
    return 0


def install(folder: str) -> str:
    """The carried wheels of `folder` (and its *.tgz packages) installed into a fresh folder: its path, which
    the steps get first on PYTHONPATH."""
    import tempfile

    site = tempfile.mkdtemp(prefix="gpu-run-site-")
    wheels = sorted(glob.glob(f"{folder}/*.whl"))
    if wheels:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--target", site, *wheels], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"pip install failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    for archive in sorted(glob.glob(f"{folder}/*.tgz")):
        with tarfile.open(archive) as tgz:
            tgz.extractall(site, filter="data")
    return site


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


def step(name: str, argv: Sequence[str], timeout: float, log: Path, site: str | None = None) -> tuple[str, str]:
    """Run one step (a command line) under `timeout` seconds, its output written to `log` as it comes (a device
    call cut off at its own limit still brings back what the step printed): (status, its last lines). A step that
    runs out is killed with every process it started (pytest's workers hold the GPU too). `site`: installed
    wheels, first on its PYTHONPATH."""
    t0 = time.perf_counter()
    path = os.pathsep.join(x for x in (site, str(ROOT), os.environ.get("PYTHONPATH")) if x)
    with open(log, "w") as sink:
        p = subprocess.Popen(list(argv), stdout=sink, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             env=os.environ | {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        try:
            p.wait(timeout=timeout)
            status = "ok" if p.returncode == 0 else f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            status = f"stopped at {timeout:.0f} s"
    tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
    print(f"== {name}: {status} in {time.perf_counter() - t0:.0f} s\n{tail}\n", flush=True)
    return status, tail


def run(search_dir: str, out: str, budget: int, steps: Sequence[str] = DEFAULT_STEPS, wheels: str | None = None,
        seconds: float = CALL_SECONDS, workloads: str = "") -> int:
    """The steps in order, each under its limit and within `seconds` in all (what is left of the device call):
    a step is given at most the seconds left, and one with under MIN_SECONDS left is not started. `workloads`
    (comma-separated names): what the per-workload steps measure (default: every workload)."""
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
    if "tvm" in steps and not Path(TVM_BUILD, "index.json").exists():
        print(f"gpu_run: no {TVM_BUILD}/index.json (run `tvm_bench.py prepare --out {TVM_BUILD}` on a CPU first)",
              file=sys.stderr)
        return 2
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        site = install(wheels) if wheels else None
    except (RuntimeError, OSError, tarfile.TarError) as e:
        print(f"gpu_run: the wheels of {wheels} did not install ({e}); nothing measured", file=sys.stderr)
        return 2
    end = time.perf_counter() + seconds
    summary = []
    for name in steps:
        left = end - time.perf_counter()
        if left < MIN_SECONDS:
            summary.append((name, f"not started: {left:.0f} s of the call left", ""))
            continue
        argv = STEPS[name].argv(sys.executable, search_dir, folder, budget)
        if workloads and STEPS[name].per_workload:
            argv += ["--workloads", workloads]
        summary.append((name, *step(name, argv, min(STEPS[name].limit, left), folder / f"{name}.log", site)))
    if "gpu_bench" in steps and (folder / "gpu_bench.json").exists():
        summary.append(("from-bench", *step("from-bench", [
            sys.executable, "benchmarks/tune_calibrate.py", "from-bench", str(folder / "gpu_bench.json"), "--search-dir",
            search_dir, "--out", str(folder / "tune_samples_bench.json")],
            min(120, max(MIN_SECONDS, end - time.perf_counter())), folder / "from_bench.log", site)))
    from prism.bench.gpu import format_table, with_tvm
    from prism.tune.oracle import load, regrets
    from prism.tune.target import get_target

    if (folder / "gpu_bench.json").exists() and (folder / "tvm.json").exists():   # one table, TVM's columns in it
        runs = [json.loads((folder / f).read_text()) for f in ("gpu_bench.json", "tvm.json")]
        print(format_table(with_tvm(*runs)))

    for samples in (folder / "tune_samples.json", folder / "tune_samples_bench.json"):
        if samples.exists():
            rows = regrets(load([samples]), get_target(torch.cuda.get_device_name()))   # the calibration shipped
            print(f"{samples.name}\n| config | candidates | regret | ρ |\n|---|---|---|---|")
            for r in rows:
                print(f"| {r.group} | {r.candidates} | {r.regret:.2f} | {'' if r.rho is None else f'{r.rho:.2f}'} |")
    print("| step | status |\n|---|---|")
    for name, status, _ in summary:
        print(f"| {name} | {status} |")
    return 0 if all(status == "ok" for _, status, _ in summary) else 1


def compare(runs: Sequence[str], before: Sequence[str]) -> int:
    """Print `prism.bench.gpu.against` for gpu_bench runs and earlier ones, then the configs whose pick is slower
    than the fastest form stored for them beyond the noise the run measured (`prism.bench.gpu.regressions`): 1 if
    there is one; 2 with one line if a file is not a run or the runs were measured on different devices."""
    from prism.bench.gpu import against, regressions

    docs = []
    for path in [*runs, *before]:
        try:
            doc = json.loads(Path(path).read_text())
            if not isinstance(doc.get("rows"), list):
                raise ValueError("no rows")
        except (OSError, ValueError, AttributeError) as e:
            print(f"gpu_run: {path}: not a gpu_bench run ({e})", file=sys.stderr)
            return 2
        docs.append(doc)
    devices = sorted({str(d.get("device")) for d in docs})
    if len(devices) > 1:
        print(f"gpu_run: the runs were measured on {' and '.join(devices)}: times of different GPUs do not compare",
              file=sys.stderr)
        return 2
    print(against(docs[:len(runs)], docs[len(runs):]))
    slower = regressions(docs[:len(runs)])
    print(f"\nslower than the fastest form stored for them beyond the run's own noise: {len(slower)}"
          + "".join(f"\n- {line}" for line in slower))
    return 1 if slower else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="on a CPU: every workload's search, saved; the GPU machine's wheels")
    p.add_argument("--search-dir", required=True)
    p.add_argument("--search-time-limit", type=float, default=900.0)
    p.add_argument("--wheels", default="", help="also download the wheels the GPU machine lacks into this folder")
    r = sub.add_parser("run", help="on the GPU: tests, gpu_bench, oracle samples")
    r.add_argument("--search-dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget", type=int, default=16, help="candidates gpu_bench tunes per config")
    r.add_argument("--wheels", default="", help="a folder of `prepare --wheels`: installed for the steps")
    r.add_argument("--seconds", type=float, default=CALL_SECONDS,
                   help="the steps' seconds in all: each gets at most what is left (default %(default)s)")
    r.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                   help=f"comma-separated, run in this order: {', '.join(STEPS)} (default %(default)s)")
    r.add_argument("--workloads", default="", help="comma-separated workloads gpu_bench and oracle measure "
                   "(default: all)")
    c = sub.add_parser("compare", help="anywhere: Prism's times in gpu_bench runs against earlier runs'")
    c.add_argument("runs", nargs="+", help="gpu_bench.json files of this run")
    c.add_argument("--before", nargs="+", required=True, help="gpu_bench.json files of earlier runs (same GPU kind)")
    args = ap.parse_args(argv)
    if args.step == "compare":
        return compare(args.runs, args.before)
    if args.step == "prepare":
        return prepare(args.search_dir, args.search_time_limit) or (download_wheels(args.wheels) if args.wheels else 0)
    return run(args.search_dir, args.out, args.budget, [s for s in args.steps.split(",") if s], args.wheels or None,
               args.seconds, args.workloads)


if __name__ == "__main__":
    sys.exit(main())
