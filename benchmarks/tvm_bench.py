"""TVM, the paper's third baseline (issue 36, item 5): each workload's torch formula through TVM's Relax, with
its default GPU schedules (dlight), built here for the GPU machine.

    # on a CPU with the optional extra (pip install -e '.[tvm]'; apache-tvm's wheel is about 100 MB)
    python benchmarks/tvm_bench.py check                      # every workload at its small config, on the CPU
    python benchmarks/tvm_bench.py prepare --out tvm-build    # every config, built for sm_90: DIR/index.json

`check` builds each workload's formula for the CPU (target llvm), runs it and compares it with the workload's
float32 reference: what the TVM column computes, checked where no GPU is. `prepare` builds every config of every
workload for sm_90 and exports one library per config: CUDA source that TVM's runtime compiles with NVRTC when it
loads, so the GPU machine needs TVM's runtime only. TVM's compiler (libtvm_compiler.so, 259 MB unpacked, 57 MiB
compressed with xz) is over what a device call carries (64 MiB in all), its runtime 4 MiB.

Not yet done: the GPU half, which loads these libraries, checks them against torch and times them beside eager
and torch.compile (`prism.bench.gpu`). Found on a CPU (2026-11-26), for whoever writes it:
- `import torch` before TVM, so that TVM's CUDA runtime finds torch's libcudart;
- set `TVM_CUDA_NVRTC_EXTRA_OPTS=-I<CCCL headers>` (the nvidia-cuda-cccl wheel's `cuda` and `nv` folders), since
  TVM's CUDA code includes <cuda/std/cstdint>;
- without the compiler, TVM's NVRTC callback (`tvm_callback_cuda_compile`) fails; register one with the arch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

GPU_TARGET = {"kind": "cuda", "arch": "sm_90"}
"""What `prepare` builds for: the H100 and H200 (sm_90)."""
RTOL = 2e-2
"""`check`'s bound on max |TVM - reference| / max(1, max |reference|): float16 accuracy, as Prism's own kernels."""


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
    return from_exported_program(torch.export.export(Formula(), xs))


def _each(names: Sequence[str], configs: Callable[[Any], Sequence[dict[str, int]]], work: Callable[..., dict]) -> list:
    """`work(name, cfg)` for every config of every workload, one row each; a failure is a row that says why."""
    from prism import workloads as wl

    rows = []
    for name in names:
        for cfg in configs(wl.get(name)):
            start = time.time()
            try:
                row = work(name, cfg)
            except Exception as e:  # TVM's frontend or scheduler refusing a formula: the row says so
                row = {"failure": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"}
            rows.append({"workload": name, "config": cfg, **row, "seconds": round(time.time() - start, 2)})
            print(f"tvm: {name} {cfg}: {row.get('failure') or 'ok'}", file=sys.stderr, flush=True)
    return rows


def check_one(name: str, cfg: dict[str, int]) -> dict[str, Any]:
    """Build `name` at `cfg` for the CPU, run it on the workload's inputs, and compare with its reference."""
    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from prism import workloads as wl

    w = wl.get(name)
    xs = w.inputs(cfg, seed=0, dtype="float16")
    vm = relax.VirtualMachine(tvm.compile(relax_module(name, cfg), target=tvm.target.Target("llvm")), tvm.cpu(0))
    out = vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in xs])
    got = torch.from_numpy(np.asarray((out[0] if not hasattr(out, "numpy") else out).numpy())).float()
    want = w.reference(*[x.float() for x in xs]).float()
    error = ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item()
    return {"error": error, "ok": error <= RTOL}


def prepare_one(out: Path, name: str, cfg: dict[str, int]) -> dict[str, Any]:
    """Build `name` at `cfg` for sm_90 and export it into `out`: the library a GPU machine loads with TVM's runtime."""
    import tvm

    lib = f"{name}_" + "_".join(f"{k}{v}" for k, v in cfg.items()) + ".so"
    tvm.compile(relax_module(name, cfg), target=tvm.target.Target(GPU_TARGET)).export_library(str(out / lib))
    return {"library": lib, "target": GPU_TARGET}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("check", help="on the CPU: every workload at its small config against its reference")
    p = sub.add_parser("prepare", help="every config of every workload built for sm_90, into --out")
    p.add_argument("--out", required=True)
    for s in (c, p):
        s.add_argument("--workloads", default="", help="comma-separated (default: all)")
    args = ap.parse_args(argv)
    try:
        import tvm  # noqa: F401
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
    if args.step == "check":
        rows = _each(names, lambda w: [w.small_config], check_one)
        print(json.dumps(rows, indent=1))
        return 0 if all(r.get("ok") for r in rows) else 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = _each(names, lambda w: w.configs, lambda name, cfg: prepare_one(out, name, cfg))
    (out / "index.json").write_text(json.dumps({"tvm": tvm.__version__, "rows": rows}, indent=1))
    print(f"tvm_bench: {sum('library' in r for r in rows)} of {len(rows)} configs built into {out}")
    return 0 if all("library" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
