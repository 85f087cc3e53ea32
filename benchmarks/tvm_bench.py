"""TVM, the paper's third baseline: each workload's torch formula through TVM's Relax, with
its default GPU schedules (dlight), built on a CPU and run on the GPU machine with TVM's runtime alone.

    # on a CPU with the optional extra (pip install -e '.[tvm]'; apache-tvm's wheel is about 100 MB) and PyPI
    python benchmarks/tvm_bench.py prepare --out tvm-build    # every config for sm_90, and TVM's runtime packed
    # on the GPU machine (carry tvm-build, about 10 MB; neither TVM nor its wheels are needed there)
    python3 benchmarks/tvm_bench.py run --build tvm-build --out $OUT/tvm.json
    # the same on this CPU: every config built for it, then run and checked with TVM's runtime alone
    python benchmarks/tvm_bench.py prepare --target llvm --out DIR
    python benchmarks/tvm_bench.py run --build DIR --out DIR/tvm.json

`prepare` builds every config of every workload (`--target`: sm_90 by default) and exports one library per config:
for CUDA, source that TVM's runtime compiles with NVRTC when it loads. TVM's compiler (libtvm_compiler.so, 259 MB
unpacked) does not fit, even compressed, in what a device call carries (64 MiB in all), so `prepare` also packs TVM
without it (DIR/tvm_runtime.tar.xz, 4.9 MiB for sm_90 on 2026-11-26): its Python package and runtime
libraries, tvm_ffi for the GPU machine's Python (`--python-version`, a wheel from PyPI), and CCCL's headers (TVM's
CUDA code includes <cuda/std/cstdint>, which NVRTC lacks). `run` unpacks that, then measures in a process that can
import TVM's runtime only, as on the GPU machine: each library loaded, run on the workload's inputs, checked
against its reference, and on a GPU timed as called and as a CUDA-graph replay (`prism.tune.profile`, on torch's
stream: `tvm_ffi.use_torch_stream`). Written on a CPU, where `run` is checked with libraries built for llvm. Its
first GPU run (H200) loaded none of the CUDA libraries: TVM's CUDA runtime was never loaded (`load_cuda_runtime`
loads it now). Its second (benchmarks/results/tvm_h200_2026-11-27.json, "TVM on the H200" in docs/benchmarks.md)
ran all 19 configs; the 9 with a norm returned NaN, the rest matched the reference. The cause, read
from the built source and TVM's compile options (not yet run on a GPU since): TVM makes x.square() powf(x, 2), and
its NVRTC compile (always --use_fast_math) makes that __powf, which is NaN for x < 0. `torch_semantics` now hands TVM
the product, and torch's float32 accumulation of a float16 mean, which TVM's frontend had left in float16.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

TARGETS = {"sm_90": {"kind": "cuda", "arch": "sm_90"}, "llvm": {"kind": "llvm"}}
"""What `prepare` builds for: the H100 and H200 (sm_90), or this CPU (llvm: how `run` is checked without a GPU)."""
DROPPED = ("libtvm_compiler.so", "3rdparty", "include", "src", "web", "cmake")
"""What TVM's runtime never reads: the compiler, and source trees and headers."""
CCCL = "nvidia-cuda-cccl==13.0.85"
CCCL_HEADERS = "nvidia/cu13/include/cccl/"
CCCL_KEPT = ("cuda", "nv")
"""The CCCL header trees TVM's CUDA code includes (not thrust or cub)."""
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64"]
RTOL = 2e-2
"""Float16 accuracy, the bound Prism's own kernels meet: a row whose max |TVM - reference| / max(1, max |reference|)
is above it is marked `tvm_exact: false`. It is TVM's result all the same, and kept; the GPU table marks such rows
`(wrong)` (prism.bench.gpu). Until `torch_semantics`, TVM's builds of RMSNorm d=4096, RMSNorm-linear and nTrans were
3.4-5.0% off on the CPU (llvm, 2026-11-26), and every config with a norm gave NaN on an H200 (2026-11-27)."""


def relax_module(name: str, cfg: dict[str, int], dtype: str = "float16") -> Any:
    """Workload `name`'s torch formula at `cfg` as a Relax module (torch.export, then TVM's torch frontend)."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from prism import workloads as wl

    w = wl.get(name)

    class Formula(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return w.reference_fn(*xs)

    xs = tuple(w.inputs(cfg, seed=0, dtype=dtype))
    return from_exported_program(torch_semantics(torch.export.export(Formula(), xs)))


def torch_semantics(program: Any) -> Any:
    """`program` (a torch.export.ExportedProgram) with what torch means spelled out where TVM's frontend reads it
    otherwise, in place: a mean of float16 values accumulates in float32 (torch's accumulate type; TVM's reduction
    summed in float16, 3.4-5.0% off over 4096 entries: benchmarks/results/tvm_llvm_cpu_2026-11-27_before.json),
    and a square is a product (TVM makes it powf(x, 2), which its NVRTC compile, always --use_fast_math, turns into
    __powf: NaN for every negative x, the NaN of every config with a norm on the H200). The same math as the
    workload's formula, as torch computes it."""
    import torch

    aten = torch.ops.aten
    graph = program.graph_module.graph
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is aten.square.default:
            n.target, n.args = aten.mul.Tensor, (n.args[0], n.args[0])
        elif n.op == "call_function" and n.target is aten.mean.dim and n.meta["val"].dtype != torch.float32:
            low = n.meta["val"].dtype
            with graph.inserting_before(n):
                n.replace_input_with(n.args[0], graph.call_function(aten._to_copy.default, (n.args[0],),
                                                                    {"dtype": torch.float32}))
            with graph.inserting_after(n):
                back = graph.call_function(aten._to_copy.default, (n,), {"dtype": low})
            n.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
    graph.lint()
    program.graph_module.recompile()
    return program


def _each(names: Sequence[str], work: Callable[[str, dict[str, int]], dict]) -> list[dict[str, Any]]:
    """`work(name, cfg)` for every config of every workload, one row each; a failure is a row that says why."""
    from prism import workloads as wl

    rows = []
    for name in names:
        for cfg in wl.get(name).configs:
            start = time.time()
            try:
                row = work(name, cfg)
            except Exception as e:  # TVM's frontend or scheduler refusing a formula: the row says so
                row = {"failure": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"}
            rows.append({"workload": name, "config": cfg, **row, "seconds": round(time.time() - start, 2)})
            print(f"tvm: {name} {cfg}: {row.get('failure') or 'ok'}", file=sys.stderr, flush=True)
    return rows


def prepare_one(out: Path, target: str, name: str, cfg: dict[str, int]) -> dict[str, Any]:
    """Build `name` at `cfg` for `target` and export it into `out`: a library TVM's runtime loads."""
    import tvm

    lib = f"{name}_" + "_".join(f"{k}{v}" for k, v in cfg.items()) + ".so"
    tvm.compile(relax_module(name, cfg), target=tvm.target.Target(TARGETS[target])).export_library(str(out / lib))
    return {"library": lib}


def pack_runtime(out: Path, python_version: str, cuda: bool) -> Path:
    """out/tvm_runtime.tar.xz: TVM's package without what DROPPED names (site/tvm), tvm_ffi for `python_version`
    (site/tvm_ffi: this one where that is this Python, else its wheel from PyPI) and, for CUDA, CCCL's headers
    (cccl/, from their wheel)."""
    import tvm
    import tvm_ffi

    this = python_version == "{}.{}".format(*sys.version_info[:2])
    need = ([] if this else [f"apache-tvm-ffi=={tvm_ffi.__version__}"]) + ([CCCL] if cuda else [])
    path = out / "tvm_runtime.tar.xz"
    kept = lambda info: None if Path(info.name).name in DROPPED or "__pycache__" in info.name else info  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="tvm-wheels-") as wheels, tarfile.open(path, "w:xz") as tar:
        if need:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", python_version, "--implementation", "cp",
                            *[a for p in PLATFORMS for a in ("--platform", p)], "-d", wheels, *need], check=True)
        tar.add(Path(tvm.__file__).parent, "site/tvm", filter=kept)
        if this:
            tar.add(Path(tvm_ffi.__file__).parent, "site/tvm_ffi", filter=kept)
        for wheel in sorted(Path(wheels).glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    header = name[len(CCCL_HEADERS):] if name.startswith(CCCL_HEADERS) else ""
                    dest = ("site/" + name if name.startswith("tvm_ffi/") else
                            "cccl/" + header if header.split("/")[0] in CCCL_KEPT else None)
                    if dest and not name.endswith("/"):
                        data = z.read(name)
                        info = tarfile.TarInfo(dest)
                        info.size, info.mode = len(data), 0o755
                        tar.addfile(info, io.BytesIO(data))
    return path


def run(build: Path, out: Path) -> int:
    """Unpack build/tvm_runtime.tar.xz and measure (`measure`) in a process that imports only that runtime."""
    import torch

    try:
        target = json.loads((build / "index.json").read_text())["target"]
    except (OSError, ValueError, KeyError) as e:
        print(f"tvm_bench: {build} is not a folder of `tvm_bench.py prepare` ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    if target != "llvm" and not torch.cuda.is_available():
        print(f"tvm_bench: {build} holds libraries for {target}, and this machine has no GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tvm-runtime-") as tmp:
        with tarfile.open(build / "tvm_runtime.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        paths = [f"{tmp}/site", str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), TVM_CUDA_NVRTC_EXTRA_OPTS=f"-I{tmp}/cccl")
        return subprocess.run([sys.executable, __file__, "measure", "--build", str(build), "--out", str(out)],
                              env=env).returncode


CUDA_LOADER = "ffi.Module.load_from_bytes.cuda"
"""What loads a CUDA library's device code: registered by libtvm_runtime_cuda.so when it is loaded."""


def load_cuda_runtime() -> str:
    """Load TVM's CUDA runtime (libtvm_runtime_cuda.so, beside libtvm_runtime.so): "" once CUDA_LOADER is
    registered, else why not. TVM loads it from its CUDA backend's registration, which first imports modules
    that need the compiler; with the runtime alone that import fails, TVM passes over it, and every CUDA library
    then failed to load with "a loader of that name is not registered" (H200, 2026-11-27)."""
    import tvm_ffi
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    if tvm_ffi.get_global_func(CUDA_LOADER, allow_missing=True) is None:
        runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
        try:
            _LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
                package="tvm", target_name="tvm_runtime_cuda", extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL")
        except (OSError, RuntimeError) as e:
            return f"TVM's CUDA runtime (libtvm_runtime_cuda.so in {runtime_dir}) did not load: {e}"
    if tvm_ffi.get_global_func(CUDA_LOADER, allow_missing=True) is None:
        return f"TVM's CUDA runtime loaded, but {CUDA_LOADER} is not registered"
    return ""


def measure(build: Path, out: Path) -> int:
    """Every library of build/index.json run on its workload's inputs and checked against its reference; on a GPU
    timed as called and as a CUDA-graph replay, on torch's stream. One row per config into `out`; 0 when every
    library ran (`tvm_exact` says which matched to RTOL)."""
    import torch

    try:
        import tvm
        import tvm.runtime.vm
        import tvm_ffi
    except ImportError as e:
        print(f"tvm_bench: TVM's runtime from {build} does not import here ({e}); `prepare --python-version` names "
              "the Python it is for", file=sys.stderr)
        return 2

    from prism import workloads as wl
    from prism.bench.gpu import max_error
    from prism.tune.profile import input_copies, timings

    index = json.loads((build / "index.json").read_text())
    gpu = index["target"] != "llvm"
    if gpu:
        from tvm.support import nvcc

        missing = load_cuda_runtime()
        if missing:
            print(f"tvm_bench: {missing}", file=sys.stderr)
            return 2
        arch = index["target"]

        @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
        def _nvrtc(code: str) -> bytes:   # TVM's own calls Target.current(), which is in the compiler left behind
            return nvcc.compile_cuda(code, target_format="cubin", arch=arch, compiler="nvrtc")

    device, dev = ("cuda", tvm.cuda(0)) if gpu else ("cpu", tvm.cpu(0))
    rows = []
    for r in index["rows"]:
        row = dict(r)
        rows.append(row)
        if "library" not in r:
            continue
        try:
            w = wl.get(r["workload"])
            main = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(build / r["library"])), dev)["main"]

            def call(*xs: torch.Tensor, main: Any = main) -> torch.Tensor:
                with tvm_ffi.use_torch_stream() if gpu else contextlib.nullcontext():
                    got = main(*[tvm.runtime.from_dlpack(x) for x in xs])
                return torch.from_dlpack(got if hasattr(got, "__dlpack__") else got[0])

            xs = [x.to(device) for x in w.inputs(r["config"], seed=0, dtype="float16")]
            row["tvm_error"] = max_error(call(*xs), w.reference(*[x.float() for x in xs]))
            row["tvm_exact"] = row["tvm_error"] <= RTOL
            if gpu:
                t = timings(call, input_copies(xs))
                row["tvm_us"], row["tvm_graph_us"] = t["called_us"], t["graph_us"]
        except Exception as e:  # a library that does not load or run: the row says why
            row["tvm_failure"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
        print(f"tvm: {r['workload']} {r['config']}: " + (row.get("tvm_failure") or " ".join(
            f"{k} {row[k]:.3g}" for k in ("tvm_error", "tvm_us", "tvm_graph_us") if k in row)), file=sys.stderr)
    from tvm.base import _RUNTIME_ONLY

    out.write_text(json.dumps({"tvm": index["tvm"], "runtime_only": _RUNTIME_ONLY,
                               "device": torch.cuda.get_device_name() if gpu else "cpu", "rows": rows}, indent=1))
    return 0 if all("tvm_error" in r for r in rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="every config of every workload built, into --out, and TVM's runtime packed")
    p.add_argument("--out", required=True)
    p.add_argument("--target", choices=sorted(TARGETS), default="sm_90")
    p.add_argument("--python-version", default="", help="the Python of the machine that runs: 3.12 (the GPU "
                   "machine's) for sm_90, this one's for llvm, by default")
    p.add_argument("--workloads", default="", help="comma-separated (default: all)")
    for name, text in (("run", "on the GPU machine: unpack the runtime, load, check and time every library"),
                       ("measure", "run's second half, in a process that imports TVM's runtime only")):
        r = sub.add_parser(name, help=text)
        r.add_argument("--build", required=True, help="a folder of `prepare`")
        r.add_argument("--out", required=True, help="JSON file of one row per config")
    args = ap.parse_args(argv)
    if args.step in ("run", "measure"):
        return (run if args.step == "run" else measure)(Path(args.build), Path(args.out))
    try:
        import tvm
    except ImportError as e:
        print(f"tvm_bench: TVM is not installed ({e}); pip install -e '.[tvm]'", file=sys.stderr)
        return 2
    from prism import workloads as wl

    names = [n for n in args.workloads.split(",") if n] or wl.names()
    unknown = [n for n in names if n not in wl.names()]
    if unknown:
        print(f"tvm_bench: no workload {', '.join(unknown)}; the workloads are {', '.join(wl.names())}",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = _each(names, lambda name, cfg: prepare_one(out, args.target, name, cfg))
    (out / "index.json").write_text(json.dumps({"tvm": tvm.__version__, "target": args.target, "rows": rows},
                                               indent=1))
    cuda = args.target != "llvm"
    packed = pack_runtime(out, args.python_version or ("3.12" if cuda else "{}.{}".format(*sys.version_info[:2])), cuda)
    print(f"tvm_bench: {sum('library' in r for r in rows)} of {len(rows)} configs built into {out}; TVM's runtime "
          f"in {packed.name} ({packed.stat().st_size / 2**20:.1f} MiB)")
    return 0 if all("library" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
