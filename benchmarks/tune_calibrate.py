"""Cost-model calibration: measure candidates on a GPU, fit the model's constants, check them on held-out points.

Two steps (prism.tune.calibration says what is fitted and how):

    # on a GPU: the model's best points and a uniform sample per config, compiled, checked, timed
    PYTHONPATH=. python benchmarks/tune_calibrate.py collect --out samples.json [--samples 20] [--top 6]
        [--workloads rmsnorm,swiglu] [--search-dir DIR]
    # anywhere: fit on two thirds of each config's points, report Spearman on the other third; save a fit on all
    PYTHONPATH=. python benchmarks/tune_calibrate.py fit samples.json [--kind h100] [--save FILE]

`collect` takes every point from `Space` (each config's search result, at its real shapes), compiles them
ahead of time (the compiler's warps, registers and shared memory go into each sample's kernels), runs each
once against the reference and times it as a CUDA-graph replay (device time, which the model predicts).
`from-bench` turns a `gpu_bench.py` run into samples too: every candidate its tuner compiled and timed (the
same `time_kernels` measurement as `collect`, refined points included), rebuilt from the searches that run
tuned (`--search-dir`, by the same Prism build) with each kernel's compiled warps, registers and shared memory:

    PYTHONPATH=. python benchmarks/tune_calibrate.py from-bench gpu_bench.json --search-dir DIR --out samples.json

Each sample names its sGraph (`Sample.sgraph`), so that a later run tunes the fastest form again
(prism.tune.oracle.fastest); `identify` adds the names to a file written before samples carried them, from the
searches its run tuned:

    PYTHONPATH=. python benchmarks/tune_calibrate.py identify samples.json --search-dir DIR

`regret` replays the samples as the oracle test does (prism.tune.oracle): per config, the measured µs of the
model's pick over the fastest measured, with the shipped calibration, the data sheet's values or a fit on them
(`--constants`), or fitted on the other configs only (`--left-out`), and optionally without a field of the model
or a term (`--without dot_tile`, `--without warp_cost`: the model before it; a constant held at 0 is not
fitted), or with registers and spills as the model estimates them before compiling (`--before-compile`: the
ranking the tuner chooses what to compile by). `steps` shows, per launch field (warps, stages, loop), the measured
and predicted ratios of candidates that differ in that field only:

    PYTHONPATH=. python benchmarks/tune_calibrate.py regret samples.json [--kind h200] [--constants fit]
    PYTHONPATH=. python benchmarks/tune_calibrate.py steps samples.json [--kind h200]

`fit` prints, per config, the rank correlation of the data-sheet model and of the calibrated one on the
held-out points; `--save` writes the calibration that `prism.tune.get_target` applies (the shipped one is
prism/tune/data/<kind>.json), fitted again on every point: the held-out third judges the model's form and the
fit, and the constants shipped use all that was measured. On the 905 points of 2026-11-26 a fit on two thirds
(seed 0) put the tuner's pick for RMSNorm + MLP 25% further from the fastest measured than the calibration
before it (tests/tune/test_oracle.py); the fit on all did not, anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpu_bench import search_options  # noqa: E402  (the same search arguments)

from prism.bench.gpu import num_text, search_result  # noqa: E402
from prism.bench.paper_report import markdown_table  # noqa: E402
from prism.bench.paper_search import config_text  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect", help="time candidates on a GPU (writes samples)")
    c.add_argument("--out", default="tune_samples.json")
    c.add_argument("--samples", type=int, default=20, help="uniformly drawn points per config")
    c.add_argument("--top", type=int, default=6, help="the cost model's best points per config, added")
    c.add_argument("--workloads", default="")
    c.add_argument("--search-dir", default="")
    c.add_argument("--search-time-limit", type=float, default=900.0)
    c.add_argument("--max-block-ops", type=int, default=None)
    c.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("from-bench", help="samples from a gpu_bench.py run's timed candidates (anywhere)")
    b.add_argument("bench", help="the JSON a gpu_bench.py run wrote")
    b.add_argument("--search-dir", required=True, help="the searches that run tuned (the same Prism build)")
    b.add_argument("--out", default="tune_samples.json")
    i = sub.add_parser("identify", help="name each sample's sGraph in a file written before samples did")
    i.add_argument("samples", help="a file written by `collect` or `from-bench`")
    i.add_argument("--search-dir", required=True, help="the searches the run that measured it tuned")
    f = sub.add_parser("fit", help="fit the model's constants to collected samples")
    f.add_argument("samples", nargs="+", help="files written by `collect`")
    f.add_argument("--kind", default="h100", help="the GPU kind the samples were measured on (h100, h200)")
    f.add_argument("--save", default="", help="write the calibration here (e.g. prism/tune/data/h100.json)")
    f.add_argument("--seed", type=int, default=0, help="the held-out split's seed")
    r = sub.add_parser("regret", help="per config, the measured µs of the model's pick over the fastest measured")
    s = sub.add_parser("steps", help="per launch field, measured and predicted ratios of candidates differing in it")
    for replay in (r, s):
        replay.add_argument("samples", nargs="+", help="files written by `collect` or `from-bench`")
        replay.add_argument("--kind", default="h100", help="the GPU kind the samples were measured on (h100, h200)")
        replay.add_argument("--constants", choices=("shipped", "sheet", "fit"), default="shipped",
                            help="the shipped calibration, the data sheet's values, or a fit on these samples")
        replay.add_argument("--without", default="", help="a field of the model's kernels (KernelWork) held at "
                            "its default in every sample, or a fitted constant held at 0 (its term off): the model "
                            "before it, e.g. dot_tile, warp_cost")
        replay.add_argument("--fit-on", nargs="+", default=[], metavar="SAMPLES",
                            help="with --constants fit: fit on these files instead (earlier runs), the replayed "
                            "ones held out: how a calibration does on a run it never saw")
    r.add_argument("--before-compile", action="store_true", help="registers and spills estimated, not the "
                   "compiler's (prism.tune.oracle.before_compile): the ranking the tuner compiles by")
    r.add_argument("--left-out", action="store_true", help="each config's pick by a fit on the other configs only "
                   "(from the data sheet): the model's form and fit on a config they never saw")
    args = p.parse_args(argv)
    if args.step == "collect":
        from prism import workloads

        args.names = [n for n in args.workloads.split(",") if n] or workloads.names()
        unknown = [n for n in args.names if n not in workloads.names()]
        if unknown:
            p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(workloads.names())}")
    return args


# ---- collect (GPU) ------------------------------------------------------------------------------

def collect_config(name: str, cfg: dict, result: Any, args: argparse.Namespace, target: Any) -> list[dict[str, Any]]:
    """Samples (as JSON) of one config: the model's `top` points and `samples` uniform ones, timed."""
    from prism import workloads
    from prism.tune import Space, estimate, tune
    from prism.tune.fit import Sample
    from prism.tune.compile import compile_many
    from prism.tune.profile import input_copies, time_kernels

    w = workloads.get(name)
    program = w.build(cfg, "float16")
    space = Space(result, program, target)
    ranked = tune(result, program, budget=args.top, explore=0, refine=0, compile=False, target=target).report
    cands = [e.candidate for e in ranked.entries if e.origin == "model"]
    cands += [c for c in space.sample(args.samples, seed=args.seed) if c not in cands]
    graphs = [space.instantiate(c) for c in cands]
    compiled = compile_many(graphs, arch=target.arch)
    xs = [x.cuda() for x in w.inputs(cfg, seed=args.seed, dtype="float16")]
    copies = input_copies(xs)
    want = w.reference(*[x.float() for x in xs])
    group = f"{name} {config_text(cfg)}"
    out = []
    for c, g, cr in zip(cands, graphs, compiled):
        if not cr.ok:
            continue
        t = time_kernels(g, xs, want, copies)   # as the tuner times a candidate
        if t.us is None:  # reported, not hidden: a candidate the space offers should run correctly
            print(f"{group} {c}: {t.dropped}, not sampled", file=sys.stderr)
            continue
        kernels = tuple(k.work for k in estimate(g, target, aot=cr.kernels).kernels)
        out.append(Sample(group, str(c), kernels, t.us, result.graphs[c.graph].identity).to_json())
    return out


def collect(args: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        print("tune_calibrate: no CUDA GPU visible to torch; nothing measured", file=sys.stderr)
        return 2
    from prism import workloads
    from prism.tune.compile import kept_workers
    from prism.tune.target import TARGETS, gpu_kind

    device = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    sheet = TARGETS[gpu_kind(device)].with_(arch=10 * major + minor)   # data-sheet constants: samples are raw
    samples: list[dict[str, Any]] = []
    start = time.time()
    with kept_workers():   # every config compiles on the same workers
        for name in args.names:
            result = search_result(name, search_options(args), lambda line: print(line, file=sys.stderr))
            for cfg in workloads.get(name).configs:
                t0 = time.time()
                got = collect_config(name, cfg, result, args, sheet)
                samples += got
                print(f"{name} {cfg}: {len(got)} timed in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
                Path(args.out).write_text(json.dumps({"device": device, "seconds": time.time() - start,
                                                      "samples": samples}, indent=1))
    return 0


def from_bench(args: argparse.Namespace) -> int:
    """Samples of every candidate a gpu_bench run timed; refuses in one line when its searches are not the ones
    that run tuned (another build, or a candidate that instantiates into other kernels than it compiled)."""
    from prism import workloads
    from prism.codegen.aot import AotKernel
    from prism.codegen.split import SPLIT_K
    from prism.errors import PrismError
    from prism.runtime.pipeline import check_search_result
    from prism.search import SearchResult
    from prism.tune import Space, estimate
    from prism.tune.fit import Sample
    from prism.tune.space import Candidate
    from prism.tune.target import TARGETS, gpu_kind

    run = json.loads(Path(args.bench).read_text())
    sheet = TARGETS[gpu_kind(run["device"])]   # data-sheet constants: samples are raw
    samples: list[dict[str, Any]] = []
    recombined = 0
    try:
        tuned = [row for row in run["rows"] if "report" in row]   # a row that failed holds its error only
        for row in tuned:
            name, cfg = row["workload"], row["config"]
            result = SearchResult.load(Path(args.search_dir) / f"{name}.json")
            if run.get("build") not in (None, result.build):
                raise PrismError(f"{name}: the run tuned searches of Prism {run['build']}, {args.search_dir} holds "
                                 f"{result.build}'s")
            program = workloads.get(name).build(cfg, "float16")
            space = Space(check_search_result(result, program, f"{args.search_dir}/{name}.json"), program, sheet)
            group = f"{name} {config_text(cfg)}"
            for e in row["report"]["entries"]:
                c = e["candidate"]
                if c["graph"] < 0 or e["measured_us"] is None:  # the unfused program; a dropped candidate
                    continue
                candidate = Candidate.from_json(c)
                aot = [AotKernel(**k) for k in e["kernels"]]
                cost = estimate(space.instantiate(candidate), sheet, aot=aot)
                if run.get("split_k") != SPLIT_K and any(k.work.atomic for k in cost.kernels):
                    recombined += 1   # timed as atomic adds, a memset and a cast: this build sums in one launch
                    continue
                if not cost.compiled or any(k.num_warps != candidate.warps for k in aot[:1]):
                    raise PrismError(f"{group} {candidate}: its kernels here are not the ones the run compiled")
                samples.append(Sample(group, str(candidate), tuple(k.work for k in cost.kernels),
                                      e["measured_us"], result.graphs[candidate.graph].identity).to_json())
    except (PrismError, OSError, KeyError, ValueError) as e:
        print(f"tune_calibrate: {args.bench} cannot be read as samples ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps({"device": run["device"], "source": f"gpu_bench.py run of {run['started']}",
                                          "samples": samples}, indent=1))
    skipped = len(run["rows"]) - len(tuned)
    print(f"{len(samples)} timed candidates of {len(tuned)} config(s) written to {args.out}"
          + (f" ({skipped} config(s) without a tuning report skipped)" if skipped else ""))
    if recombined:
        print(f"{recombined} split-K candidate(s) skipped: the run timed their sums as atomic adds into a zeroed "
              "buffer, which this build combines in their launch (prism.codegen.split); stored samples keep them as "
              "timed")
    return 0


def identify(args: argparse.Namespace) -> int:
    """Names each sample's sGraph (`Sample.sgraph`) in a file written before samples carried it, from the searches
    the run that measured it tuned (`--search-dir`: the file's provenance says which); nothing else in the file
    changes. Refuses in one line where a label's sGraph is not in that search or does not instantiate at the
    sample's config and point: then the folder is not the one the run tuned."""
    from prism import workloads
    from prism.errors import PrismError
    from prism.search import SearchResult
    from prism.tune.space import Candidate

    path = Path(args.samples)
    data = json.loads(path.read_text())
    searches: dict[str, Any] = {}
    named = 0
    try:
        for s in data["samples"]:
            name, config = s["group"].split(" ", 1)
            if name not in searches:
                searches[name] = SearchResult.load(Path(args.search_dir) / f"{name}.json")
            c = Candidate.parse(s["label"])
            graphs = searches[name].graphs
            if c.graph >= len(graphs):
                raise PrismError(f"{s['group']} {c}: the search has {len(graphs)} sGraphs")
            cfg = next((cfg for cfg in workloads.get(name).configs if config_text(cfg) == config), None)
            if cfg is None:
                raise PrismError(f"{s['group']}: no config of {name} reads {config!r}")
            shapes = [t.shape for t in workloads.get(name).build(cfg, "float16").inputs]
            graphs[c.graph].instantiate(shapes, c.grid, c.loop)   # a MappingError: not the search that run tuned
            named += s.get("sgraph") != graphs[c.graph].identity
            s["sgraph"] = graphs[c.graph].identity
    except (PrismError, OSError, KeyError, ValueError) as e:
        print(f"tune_calibrate: {path} cannot be identified from {args.search_dir} ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    path.write_text(json.dumps(data, indent=1))
    print(f"{named} of {len(data['samples'])} samples of {path} named by their sGraph")
    return 0


# ---- fit (anywhere) -----------------------------------------------------------------------------

def fit(args: argparse.Namespace) -> int:
    from prism.errors import InputError
    from prism.tune.calibration import Calibration
    from prism.tune.fit import fit as fit_values, held_out, log_error, predict
    from prism.tune.oracle import read
    from prism.tune.profile import spearman
    from prism.tune.target import TARGETS

    if args.kind not in TARGETS:
        print(f"tune_calibrate: unknown kind {args.kind!r}; known: {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    try:
        samples, named = read(args.samples, args.kind)
    except InputError as e:
        print(f"tune_calibrate: {e}", file=sys.stderr)
        return 2
    devices = sorted(set(named))
    train, test = held_out(samples, seed=args.seed)
    sheet = TARGETS[args.kind]
    values = fit_values(train, sheet)
    tuned = sheet.with_(**values)
    rows, before, rhos = [], {}, {}
    for group in sorted({s.group for s in samples}):
        held = [s for s in test if s.group == group]
        meas = [s.measured_us for s in held]
        before[group], rhos[group] = spearman(predict(held, sheet), meas), spearman(predict(held, tuned), meas)
        rows.append([group, str(len(held)), num_text(before[group], "{:+.2f}"), num_text(rhos[group], "{:+.2f}")])

    def median_of(rs: dict[str, float | None]) -> float | None:
        finite = [r for r in rs.values() if r is not None]
        return statistics.median(finite) if finite else None

    median = median_of(rhos)
    rows.append(["median", str(len(test)), num_text(median_of(before), "{:+.2f}"), num_text(median, "{:+.2f}")])
    print(markdown_table(["config", "held-out points", "Spearman, data sheet", "Spearman, calibrated"], rows))
    print(f"\nfit on {len(train)} points; mean squared log error {log_error(train, sheet):.3f} -> "
          f"{log_error(train, tuned):.3f} (held out: {log_error(test, sheet):.3f} -> {log_error(test, tuned):.3f})")
    for k, v in values.items():
        print(f"  {k}: {getattr(sheet, k):.4g} -> {v:.4g}")
    if args.save:
        shipped = fit_values(samples, sheet)
        source = {"command": f"benchmarks/tune_calibrate.py fit --kind {args.kind} " + " ".join(args.samples),
                  "devices": devices,
                  "date": time.strftime("%Y-%m-%d"), "samples": len(samples), "fitted_on": len(samples),
                  "held_out_check": {"fitted_on": len(train), "held_out": len(test), "spearman_held_out": rhos,
                                     "median_spearman_held_out": median}}
        path = Calibration(args.kind, ", ".join(devices), shipped, source).save(args.save)
        print(f"saved {path}, fitted again on all {len(samples)} points:")
        for k, v in shipped.items():
            print(f"  {k}: {getattr(sheet, k):.4g} -> {v:.4g}")
    return 0


def _replay(args: argparse.Namespace) -> tuple[list, Any]:
    """The samples and the target a replay (`regret`, `steps`) runs the model with: `--constants`, `--without`;
    a SystemExit(2) after one line when they cannot be had."""
    from dataclasses import MISSING, fields, replace

    from prism.errors import InputError
    from prism.tune.calibration import FITTED
    from prism.tune.cost import KernelWork
    from prism.tune.fit import fit as fit_values
    from prism.tune.oracle import load
    from prism.tune.target import TARGETS, get_target

    def refuse(line: str) -> SystemExit:
        print(f"tune_calibrate: {line}", file=sys.stderr)
        return SystemExit(2)

    if args.kind not in TARGETS:
        raise refuse(f"unknown kind {args.kind!r}; known: {', '.join(TARGETS)}")
    defaults = {f.name: f.default for f in fields(KernelWork) if f.default is not MISSING}
    if args.without and args.without not in {*defaults, *FITTED}:
        raise refuse(f"--without takes a KernelWork field with a default ({', '.join(defaults)}) or a fitted "
                     f"constant ({', '.join(FITTED)})")
    if args.fit_on and (args.constants != "fit" or getattr(args, "left_out", False)):
        raise refuse("--fit-on goes with --constants fit, not with --left-out")

    def samples_of(paths: Sequence[str]) -> list:
        try:
            found = load(paths, args.kind)
        except InputError as e:
            raise refuse(str(e)) from None
        if args.without in defaults:
            found = [replace(s, kernels=tuple(replace(k, **{args.without: defaults[args.without]})
                                              for k in s.kernels)) for s in found]
        return found

    samples = samples_of(args.samples)
    off = {args.without: 0.0} if args.without in FITTED else {}     # a constant at 0: its term off, never fitted
    sheet = TARGETS[args.kind].with_(**off)
    if getattr(args, "left_out", False):
        return samples, sheet                     # each config is fitted apart (prism.tune.oracle.left_out)
    target = {"shipped": lambda: get_target(args.kind).with_(**off), "sheet": lambda: sheet,
              "fit": lambda: sheet.with_(**fit_values(samples_of(args.fit_on) if args.fit_on else samples, sheet))
              }[args.constants]()
    return samples, target


def regret(args: argparse.Namespace) -> int:
    """The oracle's replay (prism.tune.oracle.regrets) of the samples: per config the model's pick, the fastest
    measured and the regret, then their geomean, maximum and how many are within the goal of 1.10. With
    `--left-out`, each config's pick comes from a fit on the other configs (prism.tune.oracle.left_out)."""
    from prism.tune.oracle import before_compile, left_out, regrets

    samples, target = _replay(args)
    if args.before_compile:
        samples = before_compile(samples, target)
    found = left_out(samples, target) if args.left_out else regrets(samples, target)
    print(markdown_table(["config", "candidates", "regret", "Spearman", "picked", "fastest"],
                         [[r.group, str(r.candidates), f"{r.regret:.2f}", num_text(r.rho, "{:+.2f}"), r.picked, r.best]
                          for r in found]))
    values = [r.regret for r in found]
    print(f"\nregret over {len(found)} configs: geomean {statistics.geometric_mean(values):.2f}, max {max(values):.2f}, "
          f"{sum(v <= 1.10 for v in values)} within 1.10")
    return 0


def steps(args: argparse.Namespace) -> int:
    """prism.tune.oracle.steps for warps, stages and loop: per step between neighbouring values, how much slower
    the measured and the predicted candidates got, over the pairs of each config that differ in that field only."""
    from prism.tune.oracle import steps as field_steps

    samples, target = _replay(args)
    rows = [[st.field, f"{st.low} -> {st.high}", str(st.pairs), f"x{st.measured:.2f}", f"x{st.predicted:.2f}"]
            for field in ("warps", "stages", "loop") for st in field_steps(samples, target, field)]
    print(markdown_table(["field", "step", "pairs", "measured", "predicted"], rows))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return {"collect": collect, "from-bench": from_bench, "identify": identify, "fit": fit, "regret": regret,
            "steps": steps}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
