"""GPU timing: medians from `triton.testing.do_bench` over rotated input copies; rank agreement.

`do_bench` already flushes L2 between runs; on top of that, every run takes the next of several input
copies (enough to exceed twice the L2 cache), so a kernel never finds last run's operands cached.
Nothing here runs without a GPU except `spearman` and `random_inputs` (on the CPU).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES

__all__ = ["L2_BYTES", "TIMING_MS", "Timing", "agreement", "bench", "bench_graph", "beside_torch", "copies_for",
           "input_copies", "kernel_profile", "random_inputs", "timings",
           "spearman", "ranks", "close", "time_kernels"]

L2_BYTES = 50 * 2**20
"""L2 cache of an H100/H200 (50 MiB)."""
MAX_COPIES = 8
TIMING_MS = (10, 50)
"""do_bench warm-up and repetition time (ms) per timed candidate (the tuner's and the calibration's)."""


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's r of the ranks); None with fewer than 3 pairs or no spread."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman: {len(xs)} values against {len(ys)}")
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def random_inputs(graph: KernelGraph, seed: int = 0, device: Any = "cpu",
                  strides: Sequence[Sequence[int]] | None = None) -> list[torch.Tensor]:
    """One tensor per input, uniform in ±[0.5, 1.5)/sqrt(last dim): never zero, and small enough that
    products over the last dim and exponentials of them stay well inside float16. `strides`: each input's, as
    the caller passes them (a `Linear`'s weight read transposed; None: contiguous): a kernel is compiled and
    timed for the layout it will read."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k, t in enumerate(graph.inputs):
        v = torch.rand(t.shape, generator=gen) * 2 - 1
        v = (v + torch.where(v < 0, -0.5, 0.5)) / math.sqrt(t.shape[-1])
        v = v.to(device=device, dtype=TORCH_DTYPES[t.dtype])
        if strides is not None and tuple(strides[k]) != v.stride():
            v = torch.empty_strided(t.shape, strides[k], dtype=v.dtype, device=v.device).copy_(v)
        out.append(v)
    return out


def copies_for(nbytes: int, l2: int = L2_BYTES, limit: int = MAX_COPIES) -> int:
    """How many input copies to rotate through so that consecutive runs touch over 2x the L2 cache."""
    return max(2, min(limit, math.ceil(2 * l2 / max(1, nbytes))))


def input_copies(inputs: Sequence[torch.Tensor], count: int | None = None) -> list[list[torch.Tensor]]:
    """`inputs` and clones of them, `count` sets in all (default: `copies_for` their total size)."""
    nbytes = sum(t.numel() * t.element_size() for t in inputs)
    count = copies_for(nbytes) if count is None else count
    return [list(inputs)] + [[t.clone() for t in inputs] for _ in range(count - 1)]


def bench(fn: Callable[..., Any], copies: Sequence[Sequence[torch.Tensor]], warmup: int = 25,
          rep: int = 100) -> float:
    """Median seconds of `fn(*copy)` over rotated copies, from `triton.testing.do_bench` (CUDA only)."""
    import triton.testing

    cycle = itertools.cycle(copies)

    def run() -> None:
        fn(*next(cycle))

    return triton.testing.do_bench(run, warmup=warmup, rep=rep, return_mode="median") * 1e-3


def bench_graph(fn: Callable[..., Any], copies: Sequence[Sequence[torch.Tensor]], warmup: int = 25,
                rep: int = 100) -> float:
    """Median seconds of one `fn(*copy)` replayed from a CUDA graph that holds one call per copy: the
    device time of what `fn` launches, with no host launch path (CUDA only)."""
    import triton.testing

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capturing stream, as capture requires
        for c in copies:
            fn(*c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in copies:
            fn(*c)
    seconds = triton.testing.do_bench(graph.replay, warmup=warmup, rep=rep, return_mode="median") * 1e-3
    return seconds / len(copies)


def kernel_profile(fn: Callable[..., Any], inputs: Sequence[Any], calls: int, warmup: int = 1) -> Any:
    """torch.profiler's record of the device's kernels over `calls` calls of `fn(*inputs)`, after `warmup`
    calls (CUDA only): what the benchmarks read device time and per-kernel tables from."""
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    return prof


def timings(fn: Callable[..., Any], copies: Sequence[Sequence[torch.Tensor]]) -> dict[str, float]:
    """The two figures a benchmark reports of `fn` (CUDA only): "called_us", the best of three `bench` medians
    (as a user calls it: the host's launch path moves it), and "graph_us", the `bench_graph` median."""
    return {"called_us": min(bench(fn, copies) for _ in range(3)) * 1e6, "graph_us": bench_graph(fn, copies) * 1e6}


def close(got: torch.Tensor, want: torch.Tensor, rtol: float = 2e-2) -> tuple[bool, float]:
    """Whether `got` matches `want` to fp16 accuracy: max |got - want| <= rtol * max(1, max |want|);
    returns the verdict and the error relative to that scale."""
    got, want = got.detach().float().cpu(), want.detach().float().cpu()
    if got.shape != want.shape:
        return False, math.inf
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    err = (got - want).abs().max().item() / scale if want.numel() else 0.0
    return bool(err <= rtol), err


def beside_torch(prism: Callable[..., Any], fn: Callable[..., Any], inputs: Sequence[torch.Tensor],
                 inductor: bool = True, timer: Callable[[Callable[..., Any], list], float] | None = None
                 ) -> dict[str, Any]:
    """`prism`, a program's chosen kernels, timed beside `fn`, the same program as torch ops, run eagerly and
    compiled by Inductor (torch.compile's default mode, unless `inductor` is False), in one harness: a CUDA-graph
    replay over rotated copies of `inputs` (`bench_graph`, or `timer`). Each torch version's outputs are first
    checked against Prism's: a time is only worth comparing for the same function. Returns `eager_us`,
    `inductor_us`, `prism_us` and `how`; `inductor_error` where Inductor failed or disagreed (a finding about
    torch, so the others are still timed); only `why` where the torch ops themselves disagree."""
    want = prism(*inputs)
    wrong = _disagrees(fn, inputs, want)
    if wrong:
        return {"why": f"not timed: the program as torch ops {wrong}"}
    fns: dict[str, Callable[..., Any]] = {"prism": prism, "eager": fn}
    out: dict[str, Any] = {"how": "CUDA-graph replay medians, one process"}
    if inductor:
        try:
            compiled = torch.compile(fn, dynamic=False)
            wrong = _disagrees(compiled, inputs, want)
        except Exception as e:
            wrong = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        if wrong:
            out["inductor_error"] = wrong
        else:
            fns["inductor"] = compiled
    copies = input_copies(inputs)
    for name, f in fns.items():
        out[f"{name}_us"] = (timer or bench_graph)(f, copies) * 1e6
    return out


def _disagrees(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> str:
    """Why `fn`'s outputs on `inputs` do not match `want` (`agreement`), or ""."""
    ok, err = agreement(fn(*inputs), want)
    return "" if ok else f"disagrees with Prism's kernels (relative error {err:.1e})"


def agreement(got: Any, want: Any) -> tuple[bool, float]:
    """Whether every output in `got` matches its counterpart in `want` (each a tensor or a sequence of them) to
    fp16 accuracy (`close`), and the worst output's relative error; outputs of another count never match."""
    got, want = ([x] if isinstance(x, torch.Tensor) else list(x) for x in (got, want))
    verdicts = [close(g, w) for g, w in zip(got, want)] if len(got) == len(want) else [(False, math.inf)]
    return all(ok for ok, _ in verdicts), max(e for _, e in verdicts)


@dataclass(frozen=True)
class Timing:
    """A candidate's generated kernels, run once, checked and timed (`time_kernels`): `us` is the device time of
    one call, None when it was dropped; `dropped` says why (it failed, or disagreed with the reference by
    relative error `wrong`); `note` says how it was timed when not as a CUDA-graph replay. `seconds`: where
    the wall time went, "load" (its kernels loaded and run once), "check" and "time" (so far as it got): what
    a tuner that must spend at most seconds per config is made of."""

    us: float | None = None
    dropped: str | None = None
    wrong: float | None = None
    note: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def time_kernels(graph: KernelGraph, inputs: Sequence[torch.Tensor], want: torch.Tensor,
                 copies: Sequence[Sequence[torch.Tensor]]) -> Timing:
    """Compile `graph`'s kernels, run them on `inputs`, compare the first output with `want` (`close`), and
    time one call as a CUDA-graph replay over `copies` (as called if the capture fails): how the tuner and
    the calibration script measure a candidate. Never raises for a candidate's own failure; says it."""
    from prism.codegen import compile_graph

    seconds: dict[str, float] = {}
    start = time.perf_counter()

    def lap(phase: str) -> dict[str, float]:
        nonlocal start
        now = time.perf_counter()
        seconds[phase], start = now - start, now
        return seconds

    try:
        cg = compile_graph(graph)
        got = cg(*inputs)[0]
        torch.cuda.synchronize(got.device)
    except Exception as e:
        return Timing(dropped=f"failed to run ({type(e).__name__}: {str(e)[:200]})", seconds=lap("load"))
    lap("load")
    good, err = close(got, want)
    if not good:
        return Timing(dropped=f"wrong output (relative error {err:.2e})", wrong=err, seconds=lap("check"))
    lap("check")
    try:
        us = bench_graph(cg, copies, warmup=TIMING_MS[0], rep=TIMING_MS[1]) * 1e6
        return Timing(us, seconds=lap("time"))
    except Exception as e:  # a graph capture can fail where a plain call works: time it as called, say so
        note = f"timed as called, CUDA-graph capture failed ({type(e).__name__})"
        try:
            us = bench(cg, copies, warmup=TIMING_MS[0], rep=TIMING_MS[1]) * 1e6
            return Timing(us, note=note, seconds=lap("time"))
        except Exception as e2:
            return Timing(dropped=f"failed while timed ({type(e2).__name__}: {str(e2)[:200]})", note=note,
                          seconds=lap("time"))
