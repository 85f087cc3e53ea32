"""`prism.superoptimize(graph)`: search, instantiate parameters, choose, compile; cached on disk.

Phases: look the program up in the result cache; on a miss, run `prism.search.search` (or take the
given search result), tune (`prism.tune.tune`: rank by the cost model, compile, and time on a GPU
when there is one), store the chosen µGraph and its report; wrap it in an OptimizedGraph.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from prism.errors import InputError, PrismError
from prism.ir import KernelGraph
from prism.options import RunOptions, SearchOptions, TuneOptions
from prism.progress import Progress
from prism.provenance import build_id
from prism.runtime.buckets import DynamicGraph, SizeBuckets, parse_dynamic
from prism.runtime.cache import ResultCache, cache_key
from prism.runtime.optimized import OptimizedGraph
from prism.search.cluster import RayWorkers
from prism.tune.report import UNFUSED, Report, Status
from prism.tune.target import device_target
from prism.tune.cost import estimate
from prism.tune.tuner import tune

__all__ = ["cached_search", "cached_searches", "check_search_result", "chosen", "superoptimize", "resolve_device",
           "target_key"]

PAYLOAD = "prism.optimized"


def resolve_device(device: Any) -> torch.device:
    """None: the current CUDA device if there is one (and Triton is not interpreting: under
    TRITON_INTERPRET=1 kernels run on CPU tensors), else the CPU. "cuda" without a GPU is an error."""
    if device is None:
        from prism.codegen import interpreting

        gpu = torch.cuda.is_available() and not interpreting()
        return torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise InputError(f"superoptimize: unknown device {device!r} ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("superoptimize: device 'cuda' asked for, but torch sees no GPU")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise InputError(f"superoptimize: device must be 'cuda' or 'cpu', got {device!r}")
    return dev


def target_key(device: torch.device, target: Any = None) -> str:
    """What a result was chosen for: the GPU it was timed on, or the cost model's target."""
    t = device_target(device, target)
    return f"cuda:{torch.cuda.get_device_name(device)}:sm_{t.arch}" if device.type == "cuda" else f"cost-model:{t.name}"


def _open_cache(cache: Any) -> ResultCache | None:
    if cache is None or cache is False:
        return None
    if isinstance(cache, ResultCache):
        return cache
    if cache is True:
        return ResultCache()
    if isinstance(cache, (str, Path)):
        return ResultCache(cache)
    raise InputError(f"superoptimize: cache must be True, False, a path or a ResultCache, got {cache!r}")


def _load_result(search_result: Any):
    from prism.search import SearchResult

    if isinstance(search_result, (str, Path)):
        return SearchResult.load(search_result)
    if not isinstance(search_result, SearchResult):
        raise InputError(f"superoptimize: search_result must be a SearchResult or a path to one, "
                         f"got {type(search_result).__name__}")
    return search_result


def superoptimize(graph: KernelGraph, options: RunOptions | dict[str, Any] | None = None, *,
                  search_result: Any = None, search_options: SearchOptions | dict[str, Any] | None = None,
                  tune_options: TuneOptions | dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
                  progress: Progress | None = None, **changes: Any) -> OptimizedGraph | DynamicGraph:
    """The fastest verified fused form of `graph` found, as an OptimizedGraph. A program with several outputs
    is searched and tuned one output at a time, and outputs whose parts share forms also jointly, as one kernel
    (`_per_output`); the chosen kernels are joined into one graph. Given a search result of such a program
    (`prism.search.search`: its joint forms), the kernel writing every output is tuned from it.

    options: where and how the call runs (prism.options.RunOptions, or a dict of its fields); each field may
        also be given as a keyword (`superoptimize(g, device="cpu", cache=False)`):
        device: None (a GPU if torch sees one, else the CPU), "cuda[:i]" or "cpu". On the CPU candidates
            are ranked by the cost model (`prism.tune.cost`) and the result runs in Triton's interpreter
            or the reference executor; the report says which.
        cache: True (the default file, see `prism.runtime.cache`), False, a path, or a ResultCache.
        dynamic: dims whose sizes change from call to call, by name: {"kv": ["K.1", "V.1"]} (INPUT.DIM; the
            dims under one name always have one size). Returns a DynamicGraph (prism.runtime.buckets),
            callable at any sizes of those dims: the search is done once, the tuning once per size bucket.
        workers: worker processes for the tuning (the search's are its options').
        backend, ray_address: "ray" runs the search (unless search_options say otherwise) and the
            ahead-of-time compiles as Ray tasks, on the cluster at ray_address or a local Ray
            (prism.search.cluster); "local" (the default) in worker processes here.
    search_result: a SearchResult (or a path to a saved one) to tune instead of searching; it may have
        been searched at other sizes of the same program (another program is an InputError). It is part
        of the cache key: a cached answer is reused only for the same graphs.
    search_options: `prism.search.search`'s (a SearchOptions, or a dict of its fields: time_limit,
        max_block_ops, workers, ...).
    tune_options: the tuning's (prism.options.TuneOptions, or a dict of its fields): budget
        (candidates compiled ahead of time and, on a GPU, timed, before refinement around the best),
        time_budget (seconds of tuning after which no more candidates are refined or timed), target (the
        GPU the cost model assumes without one: "h100", the default, or "h200"), compile (False skips
        ahead-of-time compilation on the CPU: faster, less informed), seed. Keyword arguments that are not
        run options change them (`superoptimize(g, budget=8)`).
    log, progress: one line per step, and (phase, done, total) calls (`prism.progress`) while the
        search and the tuner run.
    """
    dev, job = _prepared(graph, options, search_options, tune_options, log, progress, changes)
    if job.run.dynamic is not None:
        return _dynamic(graph, parse_dynamic(graph, job.run.dynamic), dev, search_result, job)
    chosen_graph, report, result = _chosen(graph, dev, search_result, job)
    return OptimizedGraph(graph, chosen_graph, report, dev, result, pdl=job.run.pdl)


def chosen(graph: KernelGraph, *, search_result: Any = None, **options: Any) -> tuple[KernelGraph, Report, Any]:
    """What `superoptimize(graph, search_result=search_result, **options)` wraps in its OptimizedGraph: (the
    chosen graph, its report, the search result tuned or None), for a caller that wraps it elsewhere. The
    backend superoptimizes a model's regions on threads and wraps each result in the compiling thread: an
    OptimizedGraph registers a torch op and, without a GPU, warns, and the warnings filters that keep that
    warning out of a compile are process-wide, not a thread's. No `dynamic` here."""
    dev, job = _prepared(graph, None, options.pop("search_options", None), options.pop("tune_options", None),
                         options.pop("log", None), options.pop("progress", None), options)
    return _chosen(graph, dev, search_result, job)


def _prepared(graph: KernelGraph, options: Any, search_options: Any, tune_options: Any,
              log: Callable[[str], None] | None, progress: Progress | None,
              changes: dict[str, Any]) -> tuple[torch.device, _Job]:
    """superoptimize's arguments checked: the device and the job. `changes` are run options' fields, and
    the tuning's for the rest."""
    if not isinstance(graph, KernelGraph):
        raise InputError(f"superoptimize: expected a KernelGraph, got {type(graph).__name__}")
    graph.check()
    run_fields, tune_fields = ([f.name for f in fields(c)] for c in (RunOptions, TuneOptions))
    unknown = sorted(set(changes) - set(run_fields) - set(tune_fields))
    if unknown:
        raise InputError(f"superoptimize: no option {', '.join(map(repr, unknown))}; the run's are "
                         f"{', '.join(run_fields)}; the tuning's are {', '.join(tune_fields)}")
    run = RunOptions.of(options, "superoptimize", **{k: v for k, v in changes.items() if k in run_fields})
    searching = SearchOptions.of(search_options, "superoptimize")
    if run.backend == "ray" and searching.backend == "local":
        searching = replace(searching, backend=run.backend, ray_address=run.ray_address)
    tuning = TuneOptions.of(tune_options, "superoptimize", **{k: v for k, v in changes.items() if k not in run_fields})
    job = _Job(tuning, searching, run, log, progress)
    strides = job.tune.strides
    if strides is not None and [len(s) for s in strides] != [len(t.shape) for t in graph.inputs]:
        raise InputError(f"superoptimize: strides must give one stride per dim of each of the program's "
                         f"{len(graph.inputs)} input(s) (ranks {[len(t.shape) for t in graph.inputs]}), got {strides}")
    return resolve_device(run.device), job


def _chosen(graph: KernelGraph, dev: torch.device, search_result: Any, job: _Job) -> tuple[KernelGraph, Report, Any]:
    """(the chosen graph, its report, the search result tuned or None): a program with several outputs one
    output at a time (`_per_output`) unless a search result is given."""
    if len(graph.outputs) > 1 and search_result is None:
        return (*_per_output(graph, dev, job), None)
    return _optimize(graph, dev, search_result, job)


@dataclass(frozen=True)
class _Job:
    """One superoptimize call's settings, handed down its steps: what to search and tune with, the result
    cache, where the work runs, and whom to tell."""

    tune: TuneOptions
    search: SearchOptions
    run: RunOptions
    log: Callable[[str], None] | None
    progress: Progress | None


def _dynamic(graph: KernelGraph, dims: dict[str, list[tuple[int, int]]], dev: torch.device, search_result: Any,
             job: _Job) -> DynamicGraph:
    """superoptimize with dynamic dims: every size of them through one SizeBuckets (prism.runtime.buckets)."""
    if len(graph.outputs) > 1:
        raise InputError(f"superoptimize: dynamic sizes need a program with one output (this one has "
                         f"{len(graph.outputs)}); optimize each output on its own")
    if job.tune.strides is not None:
        raise InputError("superoptimize: strides with dynamic sizes: an input's strides change with its sizes; "
                         "give one or the other")
    given = None if search_result is None else check_search_result(_load_result(search_result), graph)
    found: list[Any] = [given] if given is not None else []

    def optimize(program: KernelGraph) -> OptimizedGraph:
        """Tune `program` from a search result that holds at its sizes (`_serves`): the given one, or one searched
        (or taken from the cache) at the first tuning, searched again only at the first size where a dim that was
        1 is not (`_units`: a decode step's KV cache of one position); a cached tuning is reused only if it was
        tuned from that result."""
        result = next((r for r in found if _serves(r.program, program)), None)
        if result is None:
            result = cached_search(program, job.search, job.run.cache, job.progress)
            found.append(result)
        chosen, report, _ = _optimize(program, dev, result, job)
        return OptimizedGraph(program, chosen, report, dev, result, torch_op=False, pdl=job.run.pdl)

    target = device_target(dev, job.tune.target)
    return DynamicGraph(graph, dims, SizeBuckets(optimize, dev, target, dims, job.run.pdl))


def _per_output(graph: KernelGraph, dev: torch.device, job: _Job) -> tuple[KernelGraph, Report]:
    """A program with several outputs: each output's cone (`KernelGraph.output_cone`, the ops it depends on) is
    searched (and cached) as a program of its own. Outputs whose parts share forms (Q, K and V of one norm:
    `prism.search.joint.groups`) are also searched jointly (`prism.search.join`: one kernel writing all of them,
    each output proven on its own) and tuned as one program; that kernel is taken where it is at least as fast
    as the outputs' own kernels together (measured on a GPU, estimated by the cost model on the CPU), and the
    report says so. Every output of another group is tuned on its own. The chosen kernels are joined into one
    graph, in output order, and their reports into one (`Report.joined`)."""
    from prism.search.joint import groups

    store = _open_cache(job.run.cache)
    run: list[str] = []
    cones = [graph.output_cone(k) for k in range(len(graph.outputs))]
    parts = _part_searches(cones, job.search, job.log, job.progress, store, run)
    joined = KernelGraph()
    args = [joined.input(t.shape, t.dtype, t.name) for t in graph.inputs]
    outs: dict[int, Any] = {}
    reports, members = [], []
    for group in groups(graph, [p.graphs for p in parts]):
        picks = []
        for k in group:
            if job.log:
                job.log(f"output {k} of {len(graph.outputs)}")
            chosen, report, _ = _optimize(cones[k][0], dev, parts[k], _reading(job, cones[k][1]))
            report.search["source"] = parts[k].stats.get("source", "searched")
            picks.append(([k], chosen, report))
        if len(group) > 1:
            picks = _joint(graph, group, parts, picks, dev, job, store, run)
        for ks, chosen, report in picks:
            used = graph.outputs_cone(ks)[1]
            outs.update(zip(ks, chosen.replay(joined, [args[j] for j in used])))
            reports.append(report)
            members.append(ks)
    joined.output(*(outs[k] for k in range(len(graph.outputs))))
    target = device_target(dev, job.tune.target)
    report = Report.joined(reports, baseline_us=estimate(graph, target, strides=job.tune.strides).seconds * 1e6,
                           outputs=members)
    report.notes = _events(store, run) + report.notes
    return joined, report


def _joint(graph: KernelGraph, group: tuple[int, ...], parts: list[Any], picks: list[tuple[list[int], KernelGraph,
           Report]], dev: torch.device, job: _Job, store: ResultCache | None, run: list[str]
           ) -> list[tuple[list[int], KernelGraph, Report]]:
    """`picks` (the group's outputs each tuned on its own), or the group's joint kernel where it is at least as
    fast as they are together."""
    sub, result = _joint_search(graph, group, parts, job.search, job.log, job.progress, store, run)
    names = "outputs " + "+".join(map(str, group))
    if not result.graphs:
        picks[0][2].notes.append(f"{names}: no joint form verified ({result.stats['joint']['forms']} tried); "
                                 "each has a kernel of its own")
        return picks
    if job.log:
        job.log(f"{names} in one kernel")
    chosen, report, _ = _optimize(sub, dev, result, _reading(job, graph.outputs_cone(list(group))[1]))
    report.search["source"] = result.stats.get("source", "searched")
    own, one = sum(_us(r) for _, _, r in picks), _us(report)
    said = f"{names} in one kernel: {one:.2f} us, against {own:.2f} us for their own kernels together"
    if one <= own:
        report.notes.append(said + ": taken")
        return [(list(group), chosen, report)]
    picks[0][2].notes.append(said + ": each has a kernel of its own")
    return picks


def _reading(job: _Job, used: Sequence[int]) -> _Job:
    """`job` for a part of the program that reads its inputs `used` (their strides, where given, in that order)."""
    strides = job.tune.strides
    return job if strides is None else replace(job, tune=replace(job.tune, strides=tuple(strides[j] for j in used)))


def _part_searches(cones: list[tuple[KernelGraph, Any]], options: SearchOptions, log: Callable[[str], None] | None,
                   progress: Progress | None, store: ResultCache | None, run: list[str]) -> list[Any]:
    """The search result of each output's cone (`KernelGraph.output_cone`), as `_per_output` tunes them."""
    return [_cached_search(cone, options, log, progress, store, run) for cone, _ in cones]


def _joint_search(graph: KernelGraph, group: tuple[int, ...], parts: list[Any], options: SearchOptions,
                  log: Callable[[str], None] | None, progress: Progress | None, store: ResultCache | None,
                  run: list[str]) -> tuple[KernelGraph, Any]:
    """The program of a group of outputs (`prism.search.joint.groups`) and its joint forms' search result."""
    sub, _ = graph.outputs_cone(list(group))
    return sub, _cached_search(sub, options, log, progress, store, run, parts=[parts[k] for k in group])


def _no_fused(report: Report, result: Any) -> str | None:
    """Why the unfused program was the only candidate left, if it was: the search verified no sGraph (within
    which limits, or cut short), none has a point at these shapes, or every fused candidate was dropped."""
    if not report.unfused or any(e.ok and e.candidate.graph != UNFUSED for e in report.entries):
        return None
    stats = result.stats if isinstance(result.stats, dict) else {}
    if not result.graphs:
        limits = stats.get("limits", {})
        bounds = ", ".join(f"{k}={v}" for k, v in limits.items() if k.startswith("max_"))
        if stats.get("timed_out"):
            return f"the search stopped at its time limit ({limits.get('time_limit')} s) before verifying any sGraph"
        verify = stats.get("verify", {})
        return (f"the search verified no sGraph within its limits ({bounds}): "
                f"{stats.get('generate', {}).get('structures', 0)} structure(s), {verify.get('checked', 0)} "
                f"candidate(s) checked, {verify.get('rejected', 0)} refuted; max_block_ops bounds the ops of one fused kernel")
    if not report.space.get("tilings"):
        return f"none of the {len(result.graphs)} verified sGraph(s) has a valid grid/loop point at these shapes"
    dropped = [e for e in report.entries if e.status is Status.DROPPED]
    if dropped:
        return f"every fused candidate tried was dropped (first: {dropped[0].label}: {dropped[0].why})"
    return None


def _us(report: Report) -> float:
    """The chosen candidate's time: measured where it was timed, else the cost model's estimate."""
    return float("inf") if report.best.us is None else report.best.us


def _optimize(graph: KernelGraph, dev: torch.device, search_result: Any, job: _Job
              ) -> tuple[KernelGraph, Report, Any]:
    """superoptimize for a program with one output: (the chosen graph, its report, the search result tuned,
    None when the result cache answered)."""
    start = time.time()
    gpu = dev.type == "cuda"
    given = None if search_result is None else check_search_result(_load_result(search_result), graph)
    if given is not None and not given.graphs and len(graph.outputs) > 1:
        raise InputError(f"superoptimize: the search result has no joint form of the program's {len(graph.outputs)} "
                         "outputs (no kernel writes them all); give none, and each output is searched and tuned on "
                         "its own, with joint forms where outputs share them")
    store = _open_cache(job.run.cache)
    notes: list[str] = []  # about the result: stored with it
    run: list[str] = []    # about this run's use of the cache: never stored, or every later hit would repeat them
    if given is not None and given.stale:
        notes.append(f"the given search result was made by Prism {given.build}, not this build ({build_id()}): "
                     "its graphs are verified, but graphs this build finds may be missing (search again)")
    key = fields = None
    if store is not None:
        key, fields = cache_key(graph.structural_hash(), [t.shape for t in graph.inputs],
                                [t.dtype for t in graph.inputs], target_key(dev, job.tune.target), build_id(),
                                job.search.key() if given is None else _identity(given), job.tune.strides,
                                job.tune.keep)
        try:
            hit = store.get(key, lambda payload: _decode(payload, graph))
        except Exception as e:  # an unreadable cache never stops the optimizer
            run.append(f"result cache {store.path} unusable ({type(e).__name__}: {e}); not cached")
            hit, store = None, None
        if hit is not None:
            chosen, report = hit
            report.cached = True
            report.notes = _events(store, run) + report.notes + [
                f"loaded from the result cache {store.path} in {time.time() - start:.3f} s"]
            return chosen, report, None

    result = given if given is not None else _cached_search(graph, job.search, job.log, job.progress, store, run)
    cluster = RayWorkers(job.run.workers, job.run.ray_address) if job.run.backend == "ray" and job.tune.compile else None
    tuned = tune(result, graph, job.tune, gpu=gpu, device=dev if gpu else None, workers=job.run.workers, log=job.log,
                 progress=job.progress, cluster=cluster)
    report = tuned.report
    report.search = {"source": "given" if search_result is not None else result.stats.get("source", "searched"),
                     "graphs": len(result.graphs),
                     "seconds": result.stats.get("seconds") if isinstance(result.stats, dict) else None}
    why = _no_fused(report, result)
    if why:
        report.reason += f"; no fused candidate: {why}"
    report.notes = notes + report.notes
    if store is not None:
        try:
            store.put(key, {"format": PAYLOAD, "graph": tuned.graph.to_json(), "report": report.to_json()}, fields)
        except Exception as e:
            run.append(f"could not write the result cache {store.path} ({type(e).__name__}: {e})")
    report.notes = _events(store, run) + report.notes
    return tuned.graph, report, result


def _events(store: ResultCache | None, run: list[str]) -> list[str]:
    """This run's notes about the cache, what it discarded or set aside included (taken off `store`)."""
    if store is None:
        return run
    events, store.events = store.events, []
    return events + run


def check_search_result(result: Any, graph: KernelGraph, who: str = "superoptimize") -> Any:
    """`result` if it was searched for `graph`'s program (at any sizes and dtypes, but where a dim was 1 it is 1
    here too: `_units`), else an InputError that starts with `who`."""
    theirs, ours = (", ".join(f"{t.name}{list(t.shape)}" for t in g.inputs) for g in (result.program, graph))
    if _size_free(result.program) != _size_free(graph):
        raise InputError(f"{who}: the search result was made for a different program (inputs {theirs}) than this "
                         f"one (inputs {ours}); it holds at other sizes and dtypes of its own program only")
    if not _serves(result.program, graph):
        raise InputError(f"{who}: the search result was made where a dim has extent 1 (inputs {theirs}) and here "
                         f"it has more (inputs {ours}): the search took that dim as absent, so its graphs may not "
                         "hold here; search at these sizes (or where no dim is 1)")
    return result


def _identity(result: Any) -> str:
    """A given search result's part of the cache key: a hash of its graphs (tuning another set of graphs
    is another question, even for the same program)."""
    text = json.dumps([g.to_json() for g in result.graphs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _size_free(graph: KernelGraph) -> str:
    """The structural hash with sizes and dtypes left out: a search result holds for all of them. Inputs are
    declared first, the ops after them in their order, so where a front end declared an input does not count
    (the backend's lowering declares each where it is first read; a program resized to other sizes, first)."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ("float32" if k == "dtype" else strip(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    inputs_first = KernelGraph()
    inputs_first.output(*graph.replay(inputs_first, [inputs_first.input(t.shape, t.dtype, t.name)
                                                     for t in graph.inputs]))
    return KernelGraph.from_json(strip(inputs_first.to_json())).structural_hash(shapes=False)


def _units(graph: KernelGraph) -> str:
    """Which input dims have extent 1: "1" for each, "n" for the others, input by input. The
    search takes a dim of extent 1 as no dim at all (prism.symbolic.dims.AtomSpace: UNIT), so its graphs hold
    where those dims are 1 and may not instantiate where they are not: a decode step's search (one row) served
    to a prefill left its projections unfused. A search where no dim was 1 holds where some are (a dim of one
    element is one tile), as a prefill's serves the decode step (`_wider`)."""
    return ",".join("".join("1" if n == 1 else "n" for n in t.shape) for t in graph.inputs)


def _wider(units: str, most: int = 8) -> list[str]:
    """`units` (`_units`), then the patterns with fewer of its dims 1, those with more 1s first (a search that
    took fewer dims as absent holds here too; the closest is likely the best): a decode step at batch 1 (its
    batch and row dims 1) takes its prefill's search (batch 1 only). Beyond `most` dims of extent 1, only the
    pattern with none."""
    ones = [k for k, c in enumerate(units) if c == "1"]
    kept = [c for r in range(len(ones), -1, -1) for c in itertools.combinations(ones, r)] if len(ones) <= most \
        else [tuple(ones), ()]
    return ["".join("n" if c == "1" and k not in keep else c for k, c in enumerate(units)) for keep in kept]


def _serves(searched: KernelGraph, graph: KernelGraph) -> bool:
    """Whether a search of program `searched` holds at `graph`'s sizes (the same program): no dim of extent 1
    there is more here (`_units`)."""
    return not any(a == "1" != b for a, b in zip(_units(searched), _units(graph)))


def cached_searches(graph: KernelGraph, search_options: SearchOptions | dict[str, Any] | None = None,
                    cache: Any = True) -> None:
    """Every search `superoptimize(graph)` makes, made now into the result cache: the program's, or with several
    outputs each output's cone's and each group's joint forms (`_per_output`), so that superoptimize later only
    tunes (the backend's and the background mode's searches ahead of tuning on a GPU)."""
    options, store, run = SearchOptions.of(search_options, "cached_searches"), _open_cache(cache), []
    if len(graph.outputs) == 1:
        _cached_search(graph, options, None, None, store, run)
        return
    from prism.search.joint import groups

    parts = _part_searches([graph.output_cone(k) for k in range(len(graph.outputs))], options, None, None, store,
                           run)
    for group in groups(graph, [p.graphs for p in parts]):
        if len(group) > 1:
            _joint_search(graph, group, parts, options, None, None, store, run)


def cached_search(graph: KernelGraph, search_options: SearchOptions | dict[str, Any] | None = None,
                  cache: Any = True, progress: Progress | None = None) -> Any:
    """The search result `superoptimize` tunes for `graph` when given none: from the result cache, else
    searched now (and stored there). A tuned result from the cache comes without it; this fetches it."""
    return _cached_search(graph, SearchOptions.of(search_options, "cached_search"), None, progress,
                          _open_cache(cache), [])


def _cached_search(graph: KernelGraph, options: SearchOptions, log: Callable[[str], None] | None,
                   progress: Progress | None, store: ResultCache | None, notes: list[str],
                   parts: list[Any] | None = None) -> Any:
    """The search result for `graph`'s program: from the cache if this program (at any sizes and dtypes: search
    results are size-free, but for which dims are 1, `_units`) was searched with the same options, else searched
    and stored. With `parts`
    (the search results of its outputs' parts), its joint forms (`prism.search.join`)."""
    from prism.search import SearchResult

    def searched() -> Any:
        from prism.search import join

        return _search(graph, options, log, progress) if parts is None else join(graph, parts, options,
                                                                                 progress=progress)

    if store is None:
        return searched()
    units, program = _units(graph), ("search:" if parts is None else "join:") + _size_free(graph)

    def key_of(pattern: str) -> tuple[str, dict[str, Any]]:
        return cache_key(f"{program}:{pattern}", [], [], "any", build_id(), options.key())

    key, fields = key_of(units)
    with _one_search(key):
        try:   # this program's search where its dims of extent 1 are, else one where fewer were 1 (it holds here)
            hit = next(filter(None, (store.get(k, lambda payload: SearchResult.from_json(payload))
                                     for k, _ in map(key_of, _wider(units)))), None)
        except Exception as e:  # an unreadable cache never stops the optimizer
            notes.append(f"search cache unusable ({type(e).__name__}: {e})")
            hit = None
        if hit is not None:
            hit.stats["source"] = "search cache"
            notes.append("search result from the result cache (searched earlier at other sizes or dtypes)")
            return hit
        result = searched()
        try:
            store.put(key, result.to_json(), fields)
        except Exception as e:
            notes.append(f"could not cache the search result ({type(e).__name__}: {e})")
        return result


_SEARCHING: dict[str, list[Any]] = {}
_SEARCHING_LOCK = threading.Lock()


@contextmanager
def _one_search(key: str) -> Iterator[None]:
    """One search per cache key at a time in this process. The backend starts its cones' superoptimizations on
    threads at once (`prism.capture.ahead`); two programs alike but for their sizes (a norm with the Q, K, V
    projections and the same norm with the MLP's) have one size-free search, and the second thread waits for the
    first's and finds it in the cache instead of searching again. Keys are dropped when no thread holds them."""
    with _SEARCHING_LOCK:
        entry = _SEARCHING.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _SEARCHING_LOCK:
            entry[1] -= 1
            if not entry[1]:
                del _SEARCHING[key]


def _search(graph: KernelGraph, options: SearchOptions, log: Callable[[str], None] | None,
            progress: Progress | None):
    from prism.search import search

    if log:
        log("searching fused µGraphs")
    return search(graph, options, progress=progress)


def _decode(payload: Any, program: KernelGraph) -> tuple[KernelGraph, Report]:
    """A cached payload back as (chosen graph, report); raises if anything is off, so the entry is
    discarded and recomputed."""
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD:
        raise PrismError("not a prism.optimized payload")
    chosen = KernelGraph.from_json(payload["graph"])
    got = [(t.shape, t.dtype) for t in chosen.inputs]
    want = [(t.shape, t.dtype) for t in program.inputs]
    if got != want:
        raise PrismError(f"stored graph takes {got}, the program {want}")
    if [(t.shape, t.dtype) for t in chosen.output_tensors] != [(t.shape, t.dtype) for t in program.output_tensors]:
        raise PrismError("stored graph's outputs differ from the program's")
    return chosen, Report.from_json(payload["report"])
