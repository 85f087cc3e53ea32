"""Host time of one call of a compiled graph, by path, on a GPU (the hand-written fused graph of each workload
at its first real config, fp16; no search or tuning needed).

    PYTHONPATH=. python benchmarks/launch_overhead.py [--calls 2000]

Columns, µs per call (host-bound loops: N calls, then one synchronize, so the figure is what the host
spends when the GPU keeps up):
  generic   CompiledGraph.run_generic: full input check, one allocation per buffer, Triton's kernel[grid]
  bound     CompiledGraph.__call__ once bound: cached-signature check, outputs allocated, one workspace,
            CompiledKernel.run per kernel (prism.codegen.direct_launch)
  replay    one CUDA-graph replay of the same call (device time of the kernels and the gaps between them)
  eager op  one torch eager op (x + 1 on the first input), for scale: the host cost of a torch call here
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def host_us(fn, calls: int) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def replay_us(fn) -> float:
    import torch
    import triton.testing

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3


def control(calls: int, mode: str | None) -> float:
    """Host µs per call of a trivial module (x + w, w a buffer), eager or under torch.compile(mode): the
    machinery's own cost on this host, against which a compiled Prism call is read."""
    import torch

    class Add(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.randn(8, 1024, device="cuda", dtype=torch.float16))

        def forward(self, x):
            return x + self.w

    module = Add()
    fn = module if mode is None else torch.compile(module, mode=mode, fullgraph=True)
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    return host_us(lambda: fn(x), calls)


def breakdown(name: str, calls: int) -> None:
    """The parts of one bound call of workload `name`, each timed alone (µs per call, host-bound)."""
    import torch

    import prism
    from prism.codegen import compile_graph

    w = prism.workloads.get(name)
    cfg = w.configs[0]
    cg = compile_graph(w.fused(cfg, "float16"))
    xs = [x.cuda() for x in w.inputs(cfg, seed=0, dtype="float16")]
    cg(*xs)
    bound = cg.bound[xs[0].get_device()]
    stream = torch._C._cuda_getCurrentRawStream(bound.index)
    outs = [torch.empty(shape, dtype=dtype, device=bound.device) for _, shape, dtype, _ in bound.outputs]
    ptrs: list = [0] * bound.n_buffers
    for j, t in zip(bound.inputs, xs):
        ptrs[j] = t.data_ptr()
    base, _ = bound._workspace(stream)
    for j, off in bound.offsets:
        ptrs[j] = base + off
    for (j, *_), t in zip(bound.outputs, outs):
        ptrs[j] = t.data_ptr()

    def launches():
        for k in bound.launches:
            k.run(*k.grid, stream, k.function, k.metadata, None, None, None, *[ptrs[j] for j in k.slots], *k.tail)

    shape, dtype = bound.outputs[0][1], bound.outputs[0][2]
    parts = {
        "whole bound call": lambda: cg(*xs),
        "accepts": lambda: bound.accepts(xs),
        "current stream": lambda: torch._C._cuda_getCurrentRawStream(bound.index),
        "torch.empty(device obj)": lambda: torch.empty(shape, dtype=dtype, device=bound.device),
        "torch.empty(device int)": lambda: torch.empty(shape, dtype=dtype, device=bound.index),
        "x.new_empty": lambda: xs[0].new_empty(shape),
        "launches only": launches,
        "data_ptr x3": lambda: [t.data_ptr() for t in xs],
        "is_capturing": torch.cuda.is_current_stream_capturing,
        "current_device": torch.cuda.current_device,
    }
    print(f"\n{name}: {len(bound.launches)} launch(es), {len(bound.launches[0].tail)} fixed args in the first")
    for label, fn in parts.items():
        print(f"  {label:<26} {host_us(fn, calls):6.2f} us", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--breakdown", action="store_true", help="also time the parts of a bound call")
    args = ap.parse_args()
    import torch

    import prism
    from prism.codegen import compile_graph

    from prism.codegen import native

    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {__import__('triton').__version__}; C launcher: {native.why_not() or 'built'}")
    print("| workload | kernels | launched by | generic | bound | replay | eager op | bound - replay |")
    print("|---|---|---|---|---|---|---|---|")
    for name in prism.workloads.names():
        w = prism.workloads.get(name)
        cfg = w.configs[0]
        cg = compile_graph(w.fused(cfg, "float16"))
        xs = [x.cuda() for x in w.inputs(cfg, seed=0, dtype="float16")]
        want = w.reference(*[x.float() for x in xs])
        got = cg(*xs)[0]
        assert cg.bound, "the first call binds"
        again = cg(*xs)[0]
        for out in (got, again):
            err = ((out.float() - want).abs().max() / want.abs().max()).item()
            assert err < 2e-2, f"{name}: relative error {err}"
        generic = host_us(lambda: cg.run_generic(xs), args.calls)
        bound = host_us(lambda: cg(*xs), args.calls)
        replay = replay_us(lambda: cg(*xs))
        eager = host_us(lambda: xs[0] + 1, args.calls)
        by = "C launcher" if cg.bound[xs[0].get_device()].native is not None else "CompiledKernel.run"
        print(f"| {name} | {len(cg.plan.steps)} | {by} | {generic:.1f} | {bound:.1f} | {replay:.1f} | {eager:.1f} | "
              f"{bound - replay:.1f} |", flush=True)
    print(f"\ncontrol: x + w (w held by a module) as called, µs: eager {control(args.calls, None):.1f}, "
          f"torch.compile(mode='reduce-overhead') {control(args.calls, 'reduce-overhead'):.1f}")
    if args.breakdown:
        for name in ("swiglu", "attention"):
            breakdown(name, args.calls)


if __name__ == "__main__":
    main()
