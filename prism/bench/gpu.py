"""GPU benchmark: Prism's chosen kernels against torch eager and torch.compile, as called and in CUDA graphs.

For each workload config (fp16), in one process on one GPU: superoptimize the program (the symbolic
search runs once per workload at a small config and is re-instantiated at both real configs), then
time, with `triton.testing.do_bench` medians over rotated input copies:
  called   each side as a user calls it from Python (`opt(*xs)`, the torch formula, the compiled formula):
           device time plus whatever host time the GPU waits for; the best of CALLED_TRIALS medians, since
           host time moves with whatever else the host is doing;
  graph    the same calls captured in one CUDA graph and replayed: the device time of the kernels alone;
  Prism in torch.compile(mode="reduce-overhead"): a module holding every input but the first (weights,
           KV cache) as buffers, its forward calling the OptimizedGraph (the custom op), as called.
torch.compile runs in `GPUOptions.compile_mode` (default max-autotune-no-cudagraphs, so its graph column
is captured by hand like the others). The floor is the bytes a perfect kernel moves (inputs once, output
once) over the device-to-device copy bandwidth measured at the start of the same run. Host overhead is
Prism called minus Prism graph.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import prism.workloads as wl
from prism.bench.paper_search import config_text, saved_or_searched
from prism.codegen.split import SPLIT_K
from prism.errors import PrismError
from prism.provenance import build_id
from prism.tune.oracle import fastest
from prism.tune.space import located
from prism.tune.target import gpu_kind

__all__ = ["num_text", "ratio", "COLUMNS", "GPUOptions", "GPUUnavailable", "against", "copy_bandwidth", "format_table",
           "max_error", "measure", "measure_gpu", "regressions", "require_gpu", "search_result", "with_tvm"]

"""Where the search runs: maps and structure do not depend on sizes, so one search serves every config."""

COLUMNS = ["workload", "config", "floor", "Prism graph", "compile graph", "eager graph", "TVM graph", "Prism called",
           "Prism in compile(ro)", "compile called", "eager called", "TVM called", "host overhead", "floor/Prism graph",
           "graph: compile/Prism", "graph: TVM/Prism", "called: best torch/Prism", "kernels", "space points",
           "cost-model ρ", "superoptimize s", "chosen"]
"""The table's columns. TVM's come from `benchmarks/tvm_bench.py run` (`with_tvm`); n/a where there is none."""

CALLED_TRIALS = 3
"""As-called figures are the best of this many do_bench medians (host time varies between trials)."""

Bench = Callable[[Callable[..., Any], list], float]
"""bench(fn, input copies) -> median seconds of one call."""


class GPUUnavailable(PrismError):
    """The GPU benchmark was asked for on a machine where torch sees no CUDA GPU."""


@dataclass(frozen=True)
class GPUOptions:
    """How the GPU benchmark measures; saved with its rows, since a resumed run must measure alike."""

    budget: int = 16  # candidates superoptimize compiles and times
    time_budget: float | None = None  # seconds superoptimize may tune per config
    search_dir: str | None = None  # folder of saved search results <workload>.json (read if present, else written)
    search_time_limit: float = 900.0  # seconds per workload search
    max_block_ops: int | None = None  # search limit (None: the search's default)
    warmup: int = 25  # do_bench warm-up, ms
    rep: int = 100  # do_bench repetition time, ms
    compile: bool = True  # also time torch.compile (it can take minutes)
    compile_mode: str = "max-autotune-no-cudagraphs"  # torch.compile's mode for the torch formula
    cache: bool = True  # use Prism's result cache
    seed: int = 0
    # folder of stored measured candidates (tune_samples_*.json): each config's fastest measured on this kind of
    # GPU is always among the candidates timed (prism.tune.oracle.fastest, TuneOptions.keep); None: none kept
    oracle: str | None = None


# ---- formatting (no GPU needed) ------------------------------------------------------------------

def num_text(v: Any, fmt: str = "{:.2f}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def ratio(a: Any, b: Any) -> float | None:
    """a / b, or None where either is missing or b is not positive."""
    return a / b if a is not None and b is not None and b > 0 else None


def _cells(r: dict[str, Any]) -> list[str]:
    torch_called = min((v for v in (r.get("eager_us"), r.get("compile_us")) if v is not None), default=None)
    host = None if r.get("prism_us") is None or r.get("prism_graph_us") is None else r["prism_us"] - r["prism_graph_us"]
    wrong = r.get("tvm_exact") is False     # TVM's output missed the reference: its time shown, compared with none

    def timed(k: str) -> str:
        return num_text(r.get(k)) + (" (wrong)" if wrong and k.startswith("tvm_") and r.get(k) is not None else "")

    return [r["workload"], config_text(r["config"]), num_text(r.get("floor_us"))] + [
        timed(k) for k in ("prism_graph_us", "compile_graph_us", "eager_graph_us", "tvm_graph_us",
                           "prism_us", "prism_ro_us", "compile_us", "eager_us", "tvm_us")] + [
        num_text(host), num_text(ratio(r.get("floor_us"), r.get("prism_graph_us")), "{:.0%}"),
        num_text(ratio(r.get("compile_graph_us"), r.get("prism_graph_us")), "{:.2f}x"),
        num_text(None if wrong else ratio(r.get("tvm_graph_us"), r.get("prism_graph_us")), "{:.2f}x"),
        num_text(ratio(torch_called, r.get("prism_us")), "{:.2f}x"),
        str(r.get("kernels", "n/a")), str(((r.get("report") or {}).get("space") or {}).get("points", "n/a")),
        num_text(r.get("spearman"), "{:+.2f}"), num_text(r.get("superoptimize_s"), "{:.1f}"),
        r.get("chosen") or r.get("error", "n/a")]


def with_tvm(results: dict[str, Any], tvm: dict[str, Any]) -> dict[str, Any]:
    """`results` (a run of `measure_gpu`) with each row's TVM figures from `tvm` (what `benchmarks/tvm_bench.py
    run` wrote, on the same machine) where both measured the same workload and config: tvm_us, tvm_graph_us,
    tvm_error, tvm_exact, tvm_failure."""
    found = {json.dumps([r["workload"], r["config"]], sort_keys=True): r for r in tvm.get("rows", [])}
    rows = []
    for r in results.get("rows", []):
        t = found.get(json.dumps([r["workload"], r["config"]], sort_keys=True), {})
        rows.append(r | {k: v for k, v in t.items() if k.startswith("tvm_")})
    return results | {"rows": rows}


SLOWER = 1.05
"""`against` counts a config as slower (or faster) than before when its time moved by more than this factor: runs of
the same kernels on one machine differ by a few percent."""


def against(runs: list[dict[str, Any]], before: list[dict[str, Any]]) -> str:
    """A markdown table of Prism's CUDA-graph µs per config in `runs` (gpu_bench runs, rows joined) beside the same
    config's in `before` (earlier runs on the same kind of GPU; the last row of a config wins), the ratio and both
    picks, then how many moved by more than SLOWER either way: the goal "never slower than earlier choices" in one
    command (benchmarks/gpu_run.py compare)."""
    def key(r: dict[str, Any]) -> str:
        return json.dumps([r["workload"], r["config"]], sort_keys=True)

    earlier = {key(r): r for run in before for r in run.get("rows", []) if r.get("prism_graph_us")}
    lines = ["| workload | config | before | now | before / now | chosen before | chosen now |", "|" + "---|" * 7]
    slower, faster = [], []
    for r in (r for run in runs for r in run.get("rows", [])):
        old, now = earlier.get(key(r), {}), r.get("prism_graph_us")
        moved = ratio(old.get("prism_graph_us"), now)
        if moved is not None and moved < 1 / SLOWER:
            slower.append(f"{r['workload']} {config_text(r['config'])}")
        if moved is not None and moved > SLOWER:
            faster.append(f"{r['workload']} {config_text(r['config'])}")
        lines.append(f"| {r['workload']} | {config_text(r['config'])} | {num_text(old.get('prism_graph_us'))} | "
                     f"{num_text(now)} | {num_text(moved, '{:.2f}x')} | {old.get('chosen', 'n/a')} | "
                     f"{r.get('chosen') or r.get('error', 'n/a')} |".replace("\n", " "))
    lines.append(f"\nslower than before by over {SLOWER - 1:.0%}: {len(slower)} ({'; '.join(slower) or 'none'}); "
                 f"faster: {len(faster)} ({'; '.join(faster) or 'none'})")
    return "\n".join(lines)


def format_table(results: dict[str, Any]) -> str:
    """The markdown table of a run (`results` as `measure_gpu` returns them: device, copy bandwidth, rows)."""
    mode = (results.get("options") or {}).get("compile_mode", "max-autotune-no-cudagraphs")
    head = (f"Device: {results.get('device', '?')}; copy bandwidth {num_text(results.get('copy_gbps'), '{:.0f}')} GB/s "
            f"(device-to-device, measured in this run); µs, medians of triton.testing.do_bench over rotated inputs.\n"
            f"compile: torch.compile(mode={mode!r}) of the torch formula; graph: captured in one CUDA graph and "
            "replayed; called: as called from Python; Prism in compile(ro): inside torch.compile(mode="
            "'reduce-overhead'), weights held by the module; TVM: Relax with its default GPU schedules (dlight), "
            "where benchmarks/tvm_bench.py measured it; (wrong): its output was off the float32 reference by more "
            "than float16 accuracy (tvm_error in the JSON), so no ratio. Ratios above 1x: Prism is faster.\n")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results.get("rows", []):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(r)) + " |")
    return head + "\n" + "\n".join(lines)


# ---- measuring (GPU) -----------------------------------------------------------------------------

def require_gpu() -> None:
    """Raise GPUUnavailable (one line) unless torch sees a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise GPUUnavailable("no CUDA GPU visible to torch; nothing measured")


def copy_bandwidth(bench: Bench, nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device-to-device copy (each byte read once and written once)."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    seconds = bench(lambda: dst.copy_(src), [()])
    return 2 * nbytes / seconds


def search_result(name: str, opts: GPUOptions, say: Callable[[str], None] = lambda line: None) -> Any:
    """The SearchResult of `name` at its small config: saved in `opts.search_dir` by this build of Prism, else
    searched (and saved there when a folder is given; `saved_or_searched`)."""
    w = wl.get(name)
    limits: dict[str, Any] = {"time_limit": opts.search_time_limit}
    if opts.max_block_ops is not None:
        limits["max_block_ops"] = opts.max_block_ops
    path = Path(opts.search_dir) / f"{name}.json" if opts.search_dir else None
    return saved_or_searched(path, w.build(w.small_config), lambda line: say(f"gpu: {line}"), **limits)


def max_error(got: Any, want: Any) -> float:
    """max |got - want| / max(1, max |want|), in float32: every column's error against the float32 reference."""
    got, want = got.float(), want.float()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item()


def measure(name: str, cfg: dict[str, int], result: Any, opts: GPUOptions, bench: Bench,
            copy_bps: float, kept: Any = None) -> dict[str, Any]:
    """One row: Prism's kernels for `name` at `cfg` (from search `result`), eager and compiled torch, each
    as called and in a CUDA graph; Prism inside torch.compile(reduce-overhead); the floor. `kept`: the config's
    fastest stored sample (prism.tune.fit.Sample), a point the tuning must try; the row keeps its label and µs."""
    import torch
    import torch._dynamo

    from prism.runtime import superoptimize
    from prism.tune.profile import bench_graph, input_copies

    def graphed(fn: Callable[..., Any], copies: list) -> float:
        return bench_graph(fn, copies, warmup=opts.warmup, rep=opts.rep)

    def called(fn: Callable[..., Any], copies: list) -> float:
        # host-bound figures move with whatever else the host does (a compile just finished, say):
        # the best of three medians, for every side alike
        return min(bench(fn, copies) for _ in range(CALLED_TRIALS))

    w = wl.get(name)
    row: dict[str, Any] = {"workload": name, "config": cfg, "io_bytes": w.io_bytes(cfg, "float16")}
    row["floor_us"] = row["io_bytes"] / copy_bps * 1e6
    program = w.build(cfg, "float16")
    xs = [x.cuda() for x in w.inputs(cfg, seed=opts.seed, dtype="float16")]
    copies = input_copies(xs)
    want = w.reference(*[x.float() for x in xs])
    t0 = time.time()
    keep = ((kept.sgraph, kept.label),) if kept is not None else ()
    opt = superoptimize(program, search_result=result, budget=opts.budget, time_budget=opts.time_budget,
                        device="cuda", cache=opts.cache, seed=opts.seed, keep=keep)
    row["superoptimize_s"] = time.time() - t0
    if kept is not None:
        row["kept"] = {"label": kept.label, "sgraph": kept.sgraph, "stored_us": kept.measured_us,
                       "now_us": _timed_again(opt.report, result, kept)}
    rep = opt.report
    row.update(chosen=rep.best.label if rep.best else None, method=rep.method, spearman=rep.spearman,
               report=rep.to_json(), table=rep.table(), cached=rep.cached, kernels=len(opt.compiled.plan.steps))
    row["prism_error"] = max_error(opt(*xs)[0], want)
    row["prism_us"] = called(lambda *a: opt(*a), copies) * 1e6
    row["prism_graph_us"] = graphed(lambda *a: opt(*a), copies) * 1e6
    row["eager_error"] = max_error(w.reference(*xs), want)
    row["eager_us"] = called(w.reference_fn, copies) * 1e6
    row["eager_graph_us"] = graphed(w.reference_fn, copies) * 1e6
    for key, run in (("prism_ro", lambda: _prism_in_compile(opt, xs, copies, called)),
                     ("compile", lambda: _compiled_torch(w, opts.compile_mode, xs, copies, want, called, graphed))):
        if key == "compile" and not opts.compile:
            continue
        torch._dynamo.reset()
        try:
            row.update(run())
        except Exception as e:  # report, never hide: the row says why there is no figure
            row[f"{key}_failure"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _timed_again(report: Any, result: Any, kept: Any) -> float | None:
    """The µs this tuning measured for the stored point `kept` (its sGraph found by identity), None if it was not
    timed (not in this search, did not instantiate, compile or run)."""
    point = located(result.graphs, kept.sgraph, kept.label)
    return next((e.measured_us for e in report.entries if e.candidate == point and e.measured_us is not None), None)


def regressions(runs: list[dict[str, Any]]) -> list[str]:
    """Configs of gpu_bench `runs` whose pick is slower than the fastest form stored for them by more than the
    run-to-run noise the run measured itself. The stored form is timed again in the run (`row["kept"]`): the same
    kernel in two processes, so `now / stored` is that noise, and a pick regressed where the tuner's time of it
    exceeds `stored × max(1, now / stored)`. The tuner chooses the fastest it timed, so that happens only where
    the stored form was not timed again (not in the search, or it failed): each such config is named."""
    out = []
    for r in (r for run in runs for r in run.get("rows", [])):
        kept, chosen = r.get("kept"), _chosen_us(r)
        if not kept or chosen is None:
            continue
        bound = max(kept["stored_us"], kept.get("now_us") or 0.0)
        if chosen > bound:
            again = "not timed again" if kept.get("now_us") is None else f"{kept['now_us']:.2f} µs again"
            out.append(f"{r['workload']} {config_text(r['config'])}: chose {chosen:.2f} µs, the stored fastest "
                       f"{kept['label']} measured {kept['stored_us']:.2f} µs ({again})")
    return out


def _chosen_us(row: dict[str, Any]) -> float | None:
    """The tuner's own measured µs of the row's chosen candidate."""
    report = row.get("report") or {}
    chosen = report.get("chosen")
    entries = report.get("entries") or []
    return entries[chosen].get("measured_us") if chosen is not None and chosen < len(entries) else None


def _prism_in_compile(opt: Any, xs: list, copies: list, bench: Bench) -> dict[str, Any]:
    """The OptimizedGraph called from a module's forward under torch.compile(mode="reduce-overhead"), the
    weights (every input but the first) held as buffers, as a model holds them; as called."""
    import torch

    class Layer(torch.nn.Module):
        def __init__(self, rest: list) -> None:
            super().__init__()
            for k, t in enumerate(rest):
                self.register_buffer(f"w{k}", t)

        def forward(self, x: Any) -> Any:
            return opt(x, *self.buffers())[0]

    layer = torch.compile(Layer(xs[1:]), mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # record, then replay
        layer(xs[0])
    return {"prism_ro_us": bench(lambda x, *rest: layer(x), copies) * 1e6}


def _compiled_torch(w: Any, mode: str, xs: list, copies: list, want: Any, bench: Bench,
                    graphed: Bench) -> dict[str, Any]:
    import torch

    compiled = torch.compile(w.reference_fn, mode=mode, dynamic=False)
    t0 = time.time()
    out = {"compile_error": max_error(compiled(*xs), want), "compile_warmup_s": time.time() - t0}
    out["compile_us"] = bench(compiled, copies) * 1e6
    out["compile_graph_us"] = graphed(compiled, copies) * 1e6
    return out


def _error_row(name: str, cfg: dict[str, int], what: str) -> dict[str, Any]:
    return {"workload": name, "config": cfg, "error": what}


def measure_gpu(names: list[str], opts: GPUOptions = GPUOptions(), *, previous: dict[str, Any] | None = None,
                save: Callable[[dict[str, Any]], None] | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every config of every workload in `names`: {device, torch, copy_gbps, options, started, build, rows}
    (`build`: the Prism build that measured, whose searches `tune_calibrate.py from-bench` needs).

    previous: an earlier, interrupted result on the same device with the same options and build; its bandwidth
    and rows are kept and only the missing configs are measured (a row with an error counts as done:
    the error is the finding). Anything else is measured afresh.
    save: called with the result after every row. Raises GPUUnavailable without a CUDA GPU.
    """
    require_gpu()
    import torch
    import torch._dynamo

    from prism.tune.compile import kept_workers
    from prism.tune.profile import bench as rotated_bench

    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    say = progress or (lambda line: None)

    def bench(fn: Callable[..., Any], copies: list) -> float:
        return rotated_bench(fn, copies, warmup=opts.warmup, rep=opts.rep)

    device = torch.cuda.get_device_name()
    if (previous and previous.get("device") == device and previous.get("options") == asdict(opts)
            and previous.get("build") == build_id()):
        results = previous
    else:
        results = {"device": device, "torch": torch.__version__, "copy_gbps": copy_bandwidth(bench) / 1e9,
                   "options": asdict(opts), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "build": build_id(),
                   "split_k": SPLIT_K, "rows": []}
    done = {json.dumps([r["workload"], r["config"]]) for r in results["rows"]}
    stored = fastest(sorted(Path(opts.oracle).glob("tune_samples_*.json")), gpu_kind(device)) if opts.oracle else {}

    def add(row: dict[str, Any]) -> None:
        results["rows"].append(row)
        say(f"gpu: {row['workload']} {config_text(row['config'])}: Prism graph {num_text(row.get('prism_graph_us'))} "
            f"us, called {num_text(row.get('prism_us'))} us; compile graph {num_text(row.get('compile_graph_us'))} us, "
            f"called {num_text(row.get('compile_us'))} us"
            + (f"; {row['error']}" if "error" in row else ""))
        if save is not None:
            save(results)

    with kept_workers():   # every config's tuning compiles on the same workers
        for name in names:
            todo = [cfg for cfg in wl.get(name).configs if json.dumps([name, cfg]) not in done]
            if not todo:
                continue
            say(f"gpu: search {name} at {config_text(wl.get(name).small_config)} ...")
            try:
                result = search_result(name, opts, say)
            except Exception as e:  # every config of the workload gets a row that says why
                for cfg in todo:
                    add(_error_row(name, cfg, f"search failed: {e}"))
                continue
            for cfg in todo:
                say(f"gpu: measure {name} {config_text(cfg)} ...")
                try:
                    add(measure(name, cfg, result, opts, bench, results["copy_gbps"] * 1e9,
                                stored.get(f"{name} {config_text(cfg)}")))
                except Exception as e:
                    add(_error_row(name, cfg, f"{type(e).__name__}: {str(e)[:300]}"))
    return results
