"""The decoder layer of examples/decoder_layer.py on a GPU: eager, torch.compile (Inductor, as called and in
reduce-overhead mode), and torch.compile(backend="prism") (as called, and with the rest in Inductor's CUDA
graphs, Prism's ops captured inside), side by side in one process, fp16; with device time per step and the
layer's launches, Prism's kernels and torch's rest (prism.capture.launches).

    PYTHONPATH=. python benchmarks/decoder_bench.py [--dim 1024 --heads 8 --hidden 2816 --batch 8 --length 512]

µs per decode step, medians of triton.testing.do_bench (the same inputs every call: a decode loop's
weights and KV cache stay where they are); every compiled variant is checked against eager first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def device_us(fn, inputs, calls: int = 20) -> float:
    """The device's kernel time per call: CUDA time of every kernel torch.profiler records over `calls` calls,
    divided by `calls` (what the host's launches and gaps between kernels do not count)."""
    import torch

    from prism.tune.profile import kernel_profile

    kernels = [e for e in kernel_profile(fn, inputs, calls).events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in kernels) / calls


def profile(fn, inputs) -> str:
    """Where one decode step's time goes: host functions by own time over 100 calls (cProfile), then the
    device's kernels and the host's aten ops by time over 20 calls (torch.profiler)."""
    import cProfile
    import io
    import pstats

    import torch

    host = cProfile.Profile()
    host.runcall(lambda: [fn(*inputs) for _ in range(100)])
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(30)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn(*inputs)
        torch.cuda.synchronize()
    table = prof.key_averages()
    return (text.getvalue() + "\n" + table.table(sort_by="cuda_time_total", row_limit=25) + "\n"
            + table.table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> int:
    from decoder_layer import SHAPE, example, shape_arguments

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(ap, 8, 1024, 8, 2816, 512)
    ap.add_argument("--budget", type=int, default=8, help="candidates Prism tunes per fused region")
    ap.add_argument("--profile", default="", help="also write where the Prism variant's time goes to this file: "
                    "the host (cProfile, 100 calls) and the device (torch.profiler, kernels by device time)")
    args = ap.parse_args()
    import torch
    import triton.testing

    import prism.capture as pc

    if not torch.cuda.is_available():
        print("decoder_bench: no CUDA GPU visible to torch; nothing measured", file=sys.stderr)
        return 2
    pc.OPTIONS.budget = args.budget
    layer, inputs = example(*(getattr(args, n) for n in SHAPE), "cuda", torch.float16)
    rows = []
    with torch.no_grad():
        want = layer(*inputs).float()
        for label, make in [("eager", lambda: layer),
                            ("torch.compile (Inductor)", lambda: torch.compile(layer)),
                            ("torch.compile (Inductor, reduce-overhead)", lambda: torch.compile(layer, mode="reduce-overhead")),
                            ('torch.compile(backend="prism")', lambda: torch.compile(layer, backend="prism")),
                            ('torch.compile(backend="prism", mode="reduce-overhead")',
                             lambda: torch.compile(layer, backend="prism", mode="reduce-overhead"))]:
            torch._dynamo.reset()
            t0 = time.time()
            fn = make()
            for _ in range(3):
                out = fn(*inputs)
            warm = time.time() - t0
            err = ((out.float() - want).norm() / want.norm()).item()
            us = triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median") * 1e3
            launches = pc.history[-1]["launches"]["total"] if "prism" in label else None
            rows.append((label, us, device_us(fn, inputs), launches, err, warm))
            if args.profile and label == 'torch.compile(backend="prism")':
                Path(args.profile).write_text(profile(fn, inputs))
            print(f"{label}: {us:.1f} us (relative error {err:.1e}, first calls {warm:.0f} s)", file=sys.stderr)
    fused = pc.history[-1]["replaced"] if pc.history else []
    print(f"device {torch.cuda.get_device_name()}; batch {args.batch}, dim {args.dim}, heads {args.heads}, hidden "
          f"{args.hidden}, KV cache {args.length}; fp16; µs per decode step (do_bench median, as called), the device's "
          "kernel time per step (torch.profiler, 20 calls), the layer's launches (Prism's and torch's)")
    print("| variant | µs | vs eager | device µs | launches (Prism + torch) | relative error "
          "| first calls (compile) s |")
    print("|---|---|---|---|---|---|---|")
    for label, us, dev, launches, err, warm in rows:
        print(f"| {label} | {us:.1f} | {rows[0][1] / us:.2f}x | {dev:.1f} | {'' if launches is None else launches} | "
              f"{err:.1e} | {warm:.0f} |")
    print(f"Prism fused {len(fused)} regions:")
    for r in fused:
        ops = ", ".join(sorted({o.split(".")[1] for o in r["ops"]}))
        print(f"- {len(r['ops'])} ops ({ops}): {r['chosen']}, {r['why']}; {len(r['dropped'])} dropped"
              + "".join(f"\n  - {d[:300]}" for d in r["dropped"][:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
