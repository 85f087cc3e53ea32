"""`prism.search`: generate sGraphs, instantiate their mappings, verify, cross-check; one call.

Phases (each timed and counted in `SearchResult.stats`):
  generate     structures explored ("states") / emitted / pruned (order, expression check, phase,
               dims, budget)
  instantiate  mappings enumerated under the linear and equality constraints, modulo symmetry; with each
               mapping that sums blocks, its partials and tail forms; after verification, the forms of each
               verified partials graph right only for some sizes (`_constrained_variants`), checked in turn
  prefilter    mappings rejected by cheap numeric runs before the verifier (optional, sound)
  verify       each mapping's size-free instance checked by the verifier (verified / rejected), in
               batches that share one e-graph run
  cross_check  every verified graph run at two concrete parameter choices; disagreements are
               unsound-axiom events, recorded with both expressions and never returned as results
In the Mirage-style mode ("mirage") generation and checking interleave per concrete choice.
The work runs on local worker processes (prism.search.parallel) or as Ray tasks (prism.search.cluster).
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from typing import Any, Callable, Sequence

from prism.errors import InputError
from prism.ir import KernelGraph, serialize
from prism.options import SearchOptions
from prism.pool import fewer_collections, importable
from prism.progress import Progress, report
from prism.search.cluster import RayWorkers
from prism.search.concrete import Modes, label_choices, matches_fixed, size_choices
from prism.search.generator import Generator, Limits, default_kernel_ops, default_max_ops
from prism.search.parallel import (Check, Checker, Workers, concrete_task, default_verify, generate_task, mirage_task,
                                   prefilter_task, verify_task)
from prism.search.joint import joint_forms
from prism.search.result import SearchResult, SymbolicGraph
from prism.symbolic.closure import Target, closure
from prism.symbolic.dims import AtomSpace
from prism.symbolic.mapping import Mapping, MappingProblem, enumerate_mappings, partial_variant
from prism.symbolic.structure import Structure, group_variant, tail_variant, walk_variant
from prism.symbolic.terms import from_graph, mk, render

__all__ = ["search", "join", "default_verify"]

INLINE_STATES = 1000
"""Generation explores this many states in-process before handing the rest to worker processes (it was 20,000:
1,000 took RMSNorm-MLP's search from 3.71 to 3.35 s, the same graphs, the others unchanged, in
`benchmarks/search_compare.py` on 2 cores)."""
CHUNK = 64
"""(structure, mapping) pairs per prefilter task, at least; a task takes whole structures (`_by_structure`)."""
BATCH = 16
"""Candidates per verification task, checked in one e-graph run (more than about 32 slow it down)."""
CONSTRAINED = (walk_variant, group_variant)
"""Forms of a verified partials graph right only for some sizes (prism.symbolic.structure): each a candidate of
its own, verified under the size constraints its proof needs (`_constrained_variants`)."""
JOINT_FORMS = 64
"""Joint forms of a program with several outputs checked, at most (prism.search.joint gives the order)."""


@fewer_collections()
def search(graph: KernelGraph, options: SearchOptions | None = None, *, verify: Callable[..., Any] | None = None,
           progress: Progress | None = None, **changes: Any) -> SearchResult:
    """Search fused µGraphs equal to `graph` for all grid sizes and loop ranges.

    options: its limits, checks and workers (prism.options.SearchOptions; default: its defaults);
        keyword arguments change them (`search(g, time_limit=60, workers=2)`).
    verify: f(reference, candidate, *, timeout) -> object with `.equal`, `.reason`; default (None)
        `prism.verify.equivalent`, imported only where candidates are verified (with worker processes,
        not in this one: egglog's import is half a second). Workers import it by name: one defined in
        the `__main__` script (or a lambda) makes the search run in this process, with a warning.
    progress: called as (phase, done, total) while the search runs: "generate" (subtrees explored),
        "verify" (candidates prefiltered out or verified), or "search" (the Mirage-style mode's concrete
        map choices).
    With `backend="ray"`, `stats["workers"]` is the cluster's CPU count; results are a local search's.
    """
    _check_graph(graph)
    opts = SearchOptions.of(options, "search", **changes)
    graph.check()
    mode = Modes.parse(opts.modes)
    start = time.time()
    deadline = start + opts.time_limit
    if len(graph.outputs) > 1:
        if mode.code != "SSS":
            raise InputError(f"search: a program with several outputs is searched with symbolic maps only "
                             f"(modes 'SSS'), not {opts.modes!r}")
        return _joint(graph, opts, verify, progress, deadline)
    space = AtomSpace(tuple(t.shape for t in graph.inputs))
    (root,) = from_graph(graph)
    target = closure(root, space)
    # the default budgets are computed once here, not by every worker task's generator
    limits = Limits(opts.max_block_ops or default_max_ops(target, opts.max_accums), opts.max_accums,
                    opts.max_outputs, opts.max_kernel_ops or default_kernel_ops(target), opts.max_grid, opts.time_limit)
    stats: dict[str, Any] = {"modes": mode.code, "limits": dict(limits.__dict__)}
    checker = Checker(serialize.dumps(graph), verify, opts.verify_timeout, opts.cross_check, opts.prefilter)
    pool = _workers(opts)
    if isinstance(pool, Workers) and pool.n > 1 and verify is not None and not importable(verify):
        warnings.warn(f"search: worker processes cannot import the verifier {verify!r} (define it in a module, "
                      "not in the __main__ script); searching in this process", RuntimeWarning, stacklevel=2)
        pool.n = 1
    stats["workers"], stats["backend"] = pool.n, opts.backend
    if mode.sizes:
        structures = _generate(target, limits, mode, deadline, pool, stats, progress)
        pairs = _instantiate(structures, mode, limits, deadline, stats)
        t0 = time.time()
        results = _check(pairs, checker, deadline, pool, progress)
        later = _constrained_variants(pairs, results)
        stats["instantiate"]["constrained_variants"] = len(later)
        pairs, results = pairs + later, results + _check(later, checker, deadline, pool, progress)
        graphs = _tally(graph, pairs, results, opts.cross_check, opts.prefilter, stats)
        stats["check_wall_seconds"] = time.time() - t0
    else:
        graphs = _mirage(graph, target, limits, mode, checker, deadline, pool, stats, progress)
    stats["target"] = {"roots": len(target.roots), "subterms": len(target.subterms), "complete": target.complete}
    stats["timed_out"] = time.time() > deadline or stats["generate"].get("timed_out", 0) > 0 or \
        stats["instantiate"]["timed_out"]
    stats["seconds"] = time.time() - start
    stats["workers"] = pool.n  # 1 if workers could not be started
    return SearchResult(graph, graphs, stats)


def _joint(graph: KernelGraph, opts: SearchOptions, verify: Callable[..., Any] | None, progress: Progress | None,
           deadline: float) -> SearchResult:
    """A program with several outputs: each output's part searched on its own, then `join`ed."""
    parts = []
    for k in range(len(graph.outputs)):
        cone, _ = graph.output_cone(k)
        parts.append(search(cone, opts, verify=verify, progress=progress,
                            time_limit=max(deadline - time.time(), 1e-3)))
    return join(graph, parts, opts, verify=verify, progress=progress, time_limit=max(deadline - time.time(), 1e-3))


def join(graph: KernelGraph, parts: Sequence[SearchResult], options: SearchOptions | None = None, *,
         verify: Callable[..., Any] | None = None, progress: Progress | None = None,
         **changes: Any) -> SearchResult:
    """The joint forms of a program with several outputs (prism.search.joint: one kernel writing them all),
    from the search result of each output's part (`graph.output_cone(k)`, in output order), checked against
    the whole program like any candidates: the prefilter, the verifier proving each output for all parallel
    sizes, the numeric cross-check. The parts' stats are kept under "parts"; no graphs where the parts
    cannot share a kernel. The arguments are `search`'s (its limits on generation are the parts')."""
    _check_graph(graph, "join")
    opts = SearchOptions.of(options, "join", **changes)
    graph.check()
    if len(parts) != len(graph.outputs) or len(parts) < 2:
        raise InputError(f"join: a program with {len(graph.outputs)} outputs needs one search result per output "
                         f"(at least 2), got {len(parts)}")
    start = time.time()
    deadline = start + opts.time_limit
    lifts = []
    for k, part in enumerate(parts):
        cone, used = graph.output_cone(k)
        if not isinstance(part, SearchResult) or \
                [len(t.shape) for t in part.program.inputs] != [len(t.shape) for t in cone.inputs]:
            raise InputError(f"join: parts[{k}] is not a search result of output {k}'s part of the program "
                             "(graph.output_cone)")
        lifts.append(used)
    stats: dict[str, Any] = {"modes": "SSS", "parts": [p.stats for p in parts]}
    forms = joint_forms(AtomSpace(tuple(t.shape for t in graph.inputs)), [(p.graphs, lift) for p, lift in
                                                                           zip(parts, lifts)], JOINT_FORMS)
    stats["joint"] = {"forms": len(forms), "seconds": time.time() - start}
    checker = Checker(serialize.dumps(graph), verify, opts.verify_timeout, opts.cross_check, opts.prefilter)
    pool = _workers(opts)
    t0 = time.time()
    graphs = _tally(graph, forms, _check(forms, checker, deadline, pool, progress), opts.cross_check,
                    opts.prefilter, stats)
    stats["check_wall_seconds"] = time.time() - t0
    for phase, counts in (("generate", ("structures", "states")), ("instantiate", ("mappings",))):
        stats[phase] = {c: sum(p[phase].get(c, 0) for p in stats["parts"]) for c in counts}
    stats["instantiate"]["candidates"] = len(forms)
    stats["cross_check"]["unsound"] += sum(p["cross_check"]["unsound"] for p in stats["parts"])
    stats["timed_out"] = time.time() > deadline or any(p["timed_out"] for p in stats["parts"])
    stats["workers"], stats["backend"] = pool.n, opts.backend
    stats["seconds"] = time.time() - start + sum(p["seconds"] for p in stats["parts"])
    return SearchResult(graph, graphs, stats)


def _check_graph(graph: Any, who: str = "search") -> None:
    """InputError for what is not a program."""
    if not isinstance(graph, KernelGraph):
        hint = f" (for a built-in workload: prism.workloads.get({graph!r}).build(config))" \
            if isinstance(graph, str) else ""
        raise InputError(f"{who}: expected a KernelGraph, got {type(graph).__name__}{hint}")


def _workers(opts: SearchOptions) -> Workers | RayWorkers:
    """Local worker processes or Ray tasks; both have `n` and `map(fn, tasks, done)`."""
    return RayWorkers(opts.workers, opts.ray_address) if opts.backend == "ray" else Workers(opts.workers)


def _ticker(progress: Progress | None, phase: str, total: int) -> Callable[[int], None]:
    """`advance(k)`: k more of `total` units of `phase` are done (reported to `progress`)."""
    done = 0
    report(progress, phase, 0, total)

    def advance(k: int) -> None:
        nonlocal done
        done += k
        report(progress, phase, done, total)
    return advance


def _settled(checks: list[Check]) -> int:
    """How many checks are final: rejected by the prefilter, verified or not, or skipped."""
    return sum(1 for c in checks if c.settled)


def _check(pairs: list[tuple[Structure, Mapping]], checker: Checker, deadline: float, pool: Workers | RayWorkers,
           progress: Progress | None) -> list[Check]:
    """Each pair's check: the prefilter on every pair (tasks of whole structures, CHUNK pairs or more),
    then the verifier and the cross-check on the ones left (tasks of BATCH, one e-graph run each). The
    "verify" progress counts candidates as the prefilter rejects them or their verification ends."""
    advance = _ticker(progress, "verify", len(pairs))
    if checker.prefilter:
        tasks = [(checker, deadline, chunk) for chunk in _by_structure(pairs, CHUNK)]
        checks = [c for out in pool.map(prefilter_task, tasks, lambda i, out: advance(_settled(out))) for c in out]
    else:
        checks = [Check() for _ in pairs]
    todo = [k for k, c in enumerate(checks) if not c.settled]
    batches = [todo[k:k + BATCH] for k in range(0, len(todo), BATCH)]
    tasks = [(checker, deadline, [pairs[j] for j in b]) for b in batches]
    for b, out in zip(batches, pool.map(verify_task, tasks, lambda i, out: advance(len(out)))):
        for j, c in zip(b, out):
            checks[j] = checks[j].then(c)
    return checks


def _by_structure(pairs: list[tuple[Structure, Mapping]], size: int) -> list[list[tuple[Structure, Mapping]]]:
    """`pairs` (a structure's pairs next to each other) in runs of at least `size` pairs that end where a
    structure's pairs do: a worker keeps the prefilter's one-dim verdicts per structure (prism.search.check
    .Prefilter), so a structure split between workers would have them computed by each."""
    chunks: list[list[tuple[Structure, Mapping]]] = []
    for st, m in pairs:
        if not chunks or (len(chunks[-1]) >= size and chunks[-1][-1][0] is not st):
            chunks.append([])
        chunks[-1].append((st, m))
    return chunks


def _generate(target: Target, limits: Limits, mode: Modes, deadline: float, pool: Workers | RayWorkers,
              stats: dict, progress: Progress | None) -> list[Structure]:
    t0 = time.time()
    gen = Generator(target, limits, deadline, modes=mode)
    starts = list(label_choices(target.space, mode, limits.max_grid))
    counts: Counter = Counter()
    found: list[Structure] = []
    if starts == [None]:
        found, rest = gen.explore([gen.start()], INLINE_STATES)
        counts.update(gen.stats)
        if rest:
            chunks = [rest[k::pool.n * 8] for k in range(min(len(rest), pool.n * 8))]
            advance = _ticker(progress, "generate", len(chunks))
            tasks = [(target, limits, deadline, mode, ch) for ch in chunks]
            for f, c in pool.map(generate_task, tasks, lambda i, out: advance(1)):
                found.extend(f)
                counts.update(c)
    else:  # one structure search per concrete imap/fmap choice
        advance = _ticker(progress, "generate", len(starts))
        tasks = [(target, limits, deadline, mode, labels) for labels in starts]
        for f, c in pool.map(concrete_task, tasks, lambda i, out: advance(1)):
            found.extend(f)
            counts.update(c)
    found.sort(key=Structure.key)
    stats["generate"] = dict(sorted(counts.items())) | {"starts": len(starts), "structures": len(found),
                                                        "seconds": time.time() - t0}
    return found


def _instantiate(structures: list[Structure], mode: Modes, limits: Limits, deadline: float,
                 stats: dict) -> list[tuple[Structure, Mapping]]:
    t0 = time.time()
    pairs: list[tuple[Structure, Mapping]] = []
    seen: set = set()
    counts = Counter()
    matched: dict[tuple, list[Mapping]] = {}  # per structure, shared by its Mirage-mode size copies
    for st in structures:
        if time.time() > deadline:
            counts["timed_out"] = 1
            break
        shape_free = (id(st.graph), st.outputs, st.kernel_ops, st.omaps)
        if shape_free not in matched:
            problem = st.problem()
            plain = [m for m in enumerate_mappings(problem, limits.max_grid)
                     if (mode.code == "SSS" or matches_fixed(st, problem, m)) and _finishes_sums(st, problem, m)]
            partials = [v for v in (partial_variant(problem, m) for m in plain) if v]
            matched[shape_free] = plain + partials + [v for v in (tail_variant(st, m) for m in partials) if v]
        key4, loop_free_key = st.key()[:4], None
        for m in matched[shape_free]:
            counts["enumerated"] += 1
            key = (key4, m, st.sizes)
            if key in seen:  # concrete omap choices can repeat a (structure, mapping)
                continue
            seen.add(key)
            if not m.loop:
                # No loop: accumulators are identities, so structures that differ only in where they
                # accumulate are one kernel; the first (smallest) in canonical order stands for all.
                loop_free_key = loop_free_key or _loop_free_key(st)
                loop_free = ("loop-free", loop_free_key, m, st.sizes)
                if loop_free in seen:
                    counts["loop_free_duplicates"] += 1
                    continue
                seen.add(loop_free)
            pairs.append((st, m))
    stats["instantiate"] = {"structures": len(structures), "mappings": counts["enumerated"],
                            "loop_free_duplicates": counts["loop_free_duplicates"], "candidates": len(pairs),
                            "timed_out": bool(counts["timed_out"]), "seconds": time.time() - t0}
    return pairs


def _finishes_sums(st: Structure, problem: MappingProblem, m: Mapping) -> bool:
    """Whether `m` is a mapping worth checking for `st` as far as its kernel-level ops go: more than one is there
    to finish what blocks sum across the grid (prism.search.generator.default_kernel_ops), so a mapping that sums
    nothing across blocks would run, after its kernel, work the kernel could have done (the structure that does
    it there is searched too)."""
    return len(st.kernel_ops) <= 1 or any(problem.partials(m) or ())


def _constrained_variants(pairs: list[tuple[Structure, Mapping]], checks: list[Check]
                          ) -> list[tuple[Structure, Mapping]]:
    """The walk and group forms (CONSTRAINED) of each partials graph the checks verified. Only of verified ones:
    at the sizes a form's constraints allow it computes what its partials graph computes, and the prefilter
    cannot run a group form at its small extents (its tiles hold no whole group), so the group form of every
    partials mapping, verified or not, would reach the e-graph."""
    return [(st, v) for (st, m), c in zip(pairs, checks) if c.equal and c.numeric_ok is not False
            for make in CONSTRAINED if (v := make(st, m))]


def _loop_free_key(st: Structure) -> tuple:
    """What a structure computes when its accumulators are identities: the saved terms, and the
    kernel-level result over them (so the order the outputs are saved in does not matter)."""
    values: list = [("saved", st.graph.terms[o]) for o in st.outputs]
    for op in st.kernel_ops:
        values.append(mk(op.op, op.attrs, *(values[i] for i in op.inputs)))
    return tuple(sorted(map(repr, values[: len(st.outputs)]))), values[-1]


def _mirage(graph: KernelGraph, target: Target, limits: Limits, mode: Modes, checker: Checker, deadline: float,
            pool: Workers | RayWorkers, stats: dict, progress: Progress | None) -> list[SymbolicGraph]:
    """The fully concrete baseline: one task per concrete imap/fmap, each searching structures for
    every grid-size/loop-range choice and checking every concrete candidate as it appears."""
    t0 = time.time()
    starts = [(labels, size_choices(target.space, labels)) for labels in label_choices(target.space, mode,
                                                                                       limits.max_grid)]
    starts = [(labels, sizes) for labels, sizes in starts if sizes]  # no sizes fit some choices
    tasks = [(target, limits, deadline, mode, labels, sizes, checker) for labels, sizes in starts]
    pairs, results, counts = [], [], Counter()
    advance = _ticker(progress, "search", len(tasks))
    for found, c in pool.map(mirage_task, tasks, lambda i, out: advance(1)):
        pairs.extend((st, m) for st, m, _ in found)
        results.extend(check for _, _, check in found)
        counts.update(c)
    stats["generate"] = dict(sorted(counts.items())) | {"starts": sum(len(s) for _, s in starts),
                                                        "structures": len(pairs), "seconds": time.time() - t0}
    stats["instantiate"] = {"mappings": len(pairs), "candidates": len(pairs), "timed_out": False, "seconds": 0.0}
    graphs = _tally(graph, pairs, results, checker.numeric, checker.prefilter, stats)
    stats["check_wall_seconds"] = 0.0
    return graphs


def _expressions(graph: KernelGraph, sg: SymbolicGraph, names: list[str]) -> tuple[str, str]:
    """The verifier's expressions (part/comb/red/repl terms) of the program and of a candidate."""
    from prism.verify.encode import encode

    try:
        cand = sg.instantiate(names=names, dtype=graph.inputs[0].dtype)
        return str(encode(graph).outputs[0]), str(encode(cand).outputs[0])
    except Exception as e:  # an expression we cannot show must not hide the event itself
        return f"<not encodable: {e}>", f"<not encodable: {e}>"


def _tally(graph: KernelGraph, pairs: list[tuple[Structure, Mapping]], checks: list[Check], numeric: bool,
           prefilter: bool, stats: dict) -> list[SymbolicGraph]:
    """Count the checks, record unsound events, and keep the verified, cross-checked graphs."""
    v = Counter()
    graphs, events = [], []
    names = [t.name for t in graph.inputs]
    for (st, m), c in zip(pairs, checks):
        if c.skipped:
            v["skipped"] += 1
            continue
        v["prefilter_seconds"] += c.prefilter_s
        if c.prefiltered:
            v["prefiltered"] += 1
            continue
        v["checked"] += 1
        v["verify_seconds"] += c.verify_s
        v["errors"] += c.error
        if not c.equal:
            v["rejected"] += 1
            continue
        v["verified"] += 1
        if numeric:
            v["cross_checked"] += 1
            v["cross_check_seconds"] += c.check_s
            if not c.numeric_ok:
                sg = SymbolicGraph(st, m)
                ref_expr, cand_expr = _expressions(graph, sg, names)
                events.append({"reference": ref_expr, "candidate": cand_expr, "program": "; ".join(render(t, names) for t in from_graph(graph)),
                               "graph": sg.describe(names), "verifier": c.reason,
                               "max_error": c.numeric_error, "detail": c.numeric_detail})
                continue
        graphs.append(SymbolicGraph(st, m, c.constraints))
    if any(g.structure.sizes is not None for g in graphs):  # Mirage mode: one result per graph, any size
        unique: dict = {}
        for g in sorted(graphs, key=SymbolicGraph.key):
            st, m = g.structure, g.mapping
            unique.setdefault(("loop-free", _loop_free_key(st), m) if not m.loop else (st.key()[:4], m), g)
        graphs = list(unique.values())
    graphs.sort(key=SymbolicGraph.key)
    stats["prefilter"] = {"enabled": prefilter, "rejected": v["prefiltered"], "seconds": v["prefilter_seconds"]}
    stats["verify"] = {k: v[k] for k in ("checked", "verified", "rejected", "errors", "skipped")} | \
        {"seconds": v["verify_seconds"]}
    stats["cross_check"] = {"checked": v["cross_checked"], "unsound": len(events), "events": events,
                            "seconds": v["cross_check_seconds"]}
    return graphs
