"""GPU benchmark: Prism's chosen kernel vs torch eager vs torch.compile(max-autotune), next to the DRAM floor.

Run (needs a CUDA GPU; refuses in one line without one):
    PYTHONPATH=. python benchmarks/gpu_bench.py [--out gpu_bench.json] [--budget 32] [--workloads rmsnorm,swiglu]

For each of the ten workload configs (fp16), in one process on one GPU: superoptimize the program (the
symbolic search runs once per workload at a small config and is re-instantiated at both real configs;
`--search-dir` keeps those results between runs), then time Prism's OptimizedGraph, the torch
reference in eager mode and under `torch.compile(mode="max-autotune")` with `triton.testing.do_bench`
medians over rotated input copies. The floor is the bytes a perfect kernel moves (inputs once, output
once) over the device-to-device copy bandwidth measured at the start of the same run. Writes every
figure to JSON and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SMALL = {("n", "d"): {"n": 4, "d": 64}, ("b", "g", "h", "d"): {"b": 2, "g": 4, "h": 32, "d": 16}}
"""Where the search runs: maps and structure do not depend on sizes, so one search serves every config."""

COLUMNS = ["workload", "config", "floor us", "Prism us", "eager us", "compile us", "Prism/floor",
           "vs eager", "vs compile", "model rho", "chosen"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu_bench.json", help="JSON file for every figure (default %(default)s)")
    p.add_argument("--workloads", default="", help="comma-separated workload names (default: all five)")
    p.add_argument("--budget", type=int, default=32, help="candidates superoptimize compiles and times")
    p.add_argument("--search-dir", default="", help="folder of saved search results <workload>.json "
                   "(read if present, written otherwise)")
    p.add_argument("--search-time-limit", type=float, default=900.0, help="seconds per workload search")
    p.add_argument("--max-block-ops", type=int, default=None, help="search limit (default: the search's)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (it can take minutes)")
    p.add_argument("--no-cache", action="store_true", help="ignore Prism's result cache")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from prism import workloads

    names = [n for n in args.workloads.split(",") if n] or workloads.names()
    unknown = [n for n in names if n not in workloads.names()]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(workloads.names())}")
    args.names = names
    return args


# ---- formatting (no GPU needed) ----------------------------------------------------------------

def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def row_cells(r: dict[str, Any]) -> list[str]:
    cfg = ",".join(f"{k}={v}" for k, v in r["config"].items())
    return [r["workload"], cfg, _num(r.get("floor_us")), _num(r.get("prism_us")), _num(r.get("eager_us")),
            _num(r.get("compile_us")), _num(_ratio(r.get("prism_us"), r.get("floor_us")), "{:.2f}x"),
            _num(_ratio(r.get("eager_us"), r.get("prism_us")), "{:.2f}x"),
            _num(_ratio(r.get("compile_us"), r.get("prism_us")), "{:.2f}x"),
            _num(r.get("spearman"), "{:+.2f}"), r.get("chosen") or r.get("error", "n/a")]


def format_table(results: dict[str, Any]) -> str:
    """The markdown table of a run (`results` as written to JSON: device, copy bandwidth, rows)."""
    head = (f"Device: {results.get('device', '?')}; copy bandwidth {_num(results.get('copy_gbps'), '{:.0f}')} GB/s "
            f"(device-to-device, measured in this run); medians of triton.testing.do_bench.\n"
            "vs eager / vs compile: their time over Prism's (above 1x: Prism is faster).\n")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results.get("rows", []):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row_cells(r)) + " |")
    return head + "\n" + "\n".join(lines)


# ---- measuring (GPU) ---------------------------------------------------------------------------

def copy_bandwidth(bench, nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device-to-device copy (each byte read once and written once)."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    seconds = bench(lambda: dst.copy_(src), [()])
    return 2 * nbytes / seconds


def _search_result(name: str, args: argparse.Namespace):
    from prism import workloads
    from prism.search import SearchResult, search

    w = workloads.get(name)
    path = Path(args.search_dir) / f"{name}.json" if args.search_dir else None
    if path is not None and path.exists():
        return SearchResult.load(path)
    opts: dict[str, Any] = {"time_limit": args.search_time_limit}
    if args.max_block_ops is not None:
        opts["max_block_ops"] = args.max_block_ops
    result = search(w.build(SMALL[w.dims]), **opts)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        result.save(path)
    return result


def _max_error(got, want) -> float:
    got, want = got.float(), want.float()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item()


def measure(name: str, cfg: dict[str, int], result, args: argparse.Namespace, bench, copy_bps: float) -> dict:
    import torch

    from prism import workloads
    from prism.runtime import superoptimize
    from prism.tune.profile import input_copies

    w = workloads.get(name)
    row: dict[str, Any] = {"workload": name, "config": cfg, "io_bytes": w.io_bytes(cfg, "float16")}
    row["floor_us"] = row["io_bytes"] / copy_bps * 1e6
    program = w.build(cfg, "float16")
    xs = [x.cuda() for x in w.inputs(cfg, seed=args.seed, dtype="float16")]
    copies = input_copies(xs)
    want = w.reference(*[x.float() for x in xs])
    t0 = time.time()
    opt = superoptimize(program, search_result=result, budget=args.budget, device="cuda",
                        cache=not args.no_cache, seed=args.seed)
    row["superoptimize_s"] = time.time() - t0
    rep = opt.report
    row.update(chosen=rep.best.label if rep.best else None, method=rep.method, spearman=rep.spearman,
               report=rep.to_json(), table=rep.table(), cached=rep.cached)
    row["prism_error"] = _max_error(opt(*xs)[0], want)
    row["prism_us"] = bench(lambda *a: opt(*a), copies) * 1e6
    row["eager_error"] = _max_error(w.reference(*xs), want)
    row["eager_us"] = bench(lambda *a: w.reference(*a), copies) * 1e6
    if not args.no_compile:
        try:
            def reference(*a):
                return w.reference_fn(*a)

            compiled = torch.compile(reference, mode="max-autotune", dynamic=False)
            t0 = time.time()
            row["compile_error"] = _max_error(compiled(*xs), want)
            row["compile_warmup_s"] = time.time() - t0
            row["compile_us"] = bench(lambda *a: compiled(*a), copies) * 1e6
        except Exception as e:  # report, never hide: the row says why there is no figure
            row["compile_failure"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU visible to torch; nothing measured", file=sys.stderr)
        return 2
    import torch._dynamo

    from prism import workloads
    from prism.tune.profile import bench as rotated_bench

    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)

    def bench(fn, copies):
        return rotated_bench(fn, copies, warmup=args.warmup, rep=args.rep)

    copy_bps = copy_bandwidth(bench)
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "copy_gbps": copy_bps / 1e9, "budget": args.budget, "rows": [],
                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for name in args.names:
        try:
            result = _search_result(name, args)
        except Exception as e:
            for cfg in workloads.get(name).configs:
                results["rows"].append({"workload": name, "config": cfg, "error": f"search failed: {e}"})
            continue
        for cfg in workloads.get(name).configs:
            try:
                row = measure(name, cfg, result, args, bench, copy_bps)
            except Exception as e:
                row = {"workload": name, "config": cfg, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            results["rows"].append(row)
            print(f"{name} {cfg}: {row.get('prism_us', 'n/a')} us", file=sys.stderr, flush=True)
            Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
