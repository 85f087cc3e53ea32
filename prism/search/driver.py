"""`prism.search`: generate sGraphs, instantiate their mappings, verify, cross-check; one call.

Phases (each timed and counted in `SearchResult.stats`):
  generate     structures explored / emitted / pruned (order, expression check, phase, dims, budget)
  instantiate  mappings enumerated under the linear and equality constraints, modulo symmetry
  verify       each mapping's size-free instance checked by the verifier (verified / rejected)
  cross_check  every verified graph run at two concrete parameter choices; disagreements are
               unsound-axiom events, recorded with both expressions and never returned as results
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

from prism.errors import GraphError
from prism.ir import KernelGraph, serialize
from prism.search.concrete import Modes, label_choices, matches_fixed, size_choices
from prism.search.generator import Generator, Limits
from prism.search.parallel import Workers, check_task, generate_task
from prism.search.result import SearchResult, SymbolicGraph
from prism.symbolic.closure import closure
from prism.symbolic.dims import AtomSpace
from prism.symbolic.mapping import Mapping, enumerate_mappings
from prism.symbolic.structure import Structure
from prism.symbolic.terms import from_graph, mk, render

__all__ = ["search", "default_verify"]

INLINE_STATES = 20000
"""Generation explores this many states in-process before handing the rest to worker processes."""
CHUNK = 64
"""(structure, mapping) pairs per verification task."""


def default_verify() -> Callable[..., Any]:
    """`prism.verify.equivalent`, the e-graph checker."""
    from prism.verify import equivalent

    return equivalent


def search(graph: KernelGraph, *, verify: Callable[..., Any] | None = None, workers: int | None = None,
           time_limit: float = 3600.0, max_block_ops: int | None = None, max_accums: int = 3,
           max_outputs: int = 2, max_kernel_ops: int = 1, max_grid: int = 3, modes: str = "SSS",
           cross_check: bool = True, prefilter: bool = True, verify_timeout: float | None = None) -> SearchResult:
    """Search fused µGraphs equal to `graph` for all grid sizes and loop ranges.

    verify: f(reference, candidate, *, timeout) -> object with `.equal`, `.reason`; a module-level
        function (workers import it); default `prism.verify.equivalent`.
    workers: processes (default: all cores; 1 runs everything in this process).
    modes: imap/fmap/omap symbolic "S" or enumerated during generation "C" (ablation), e.g. "SSS".
    prefilter: first run each mapping once at a small fixed size and skip the verifier for those that
        disagree (sound: a correct mapping agrees at every size); False sends every mapping to the
        verifier, as the paper does (and exposes more of the axioms to the cross-check).
    The limits bound block ops (loaders included; None: `generator.default_max_ops`), accumulators,
    block outputs, kernel-level ops after the fused kernel, grid dims, and total seconds.
    """
    graph.check()
    if len(graph.outputs) != 1:
        raise GraphError(f"search: the program must have exactly one output, it has {len(graph.outputs)}")
    verify = verify or default_verify()
    mode = Modes.parse(modes)
    limits = Limits(max_block_ops, max_accums, max_outputs, max_kernel_ops, max_grid, time_limit)
    start = time.time()
    deadline = start + time_limit
    space = AtomSpace(tuple(t.shape for t in graph.inputs))
    (root,) = from_graph(graph)
    target = closure(root, space)
    stats: dict[str, Any] = {"modes": mode.code, "limits": limits.__dict__ | {"max_block_ops": None}}
    with Workers(workers) as pool:
        stats["workers"] = pool.n
        structures = _generate(target, limits, mode, deadline, pool, stats)
        pairs = _instantiate(structures, mode, limits, stats)
        graphs = _check(graph, pairs, verify, verify_timeout, cross_check, prefilter, deadline, pool, stats, target)
    stats["limits"]["max_block_ops"] = Generator(target, limits).max_ops
    stats["target"] = {"roots": len(target.roots), "subterms": len(target.subterms), "complete": target.complete}
    stats["timed_out"] = time.time() > deadline or stats["generate"].get("timed_out", 0) > 0
    stats["seconds"] = time.time() - start
    return SearchResult(graph, graphs, stats)


def _generate(target, limits: Limits, mode: Modes, deadline: float, pool: Workers, stats: dict) -> list[Structure]:
    t0 = time.time()
    gen = Generator(target, limits, deadline, modes=mode)
    starts = []
    for labels in label_choices(target.space, mode, limits.max_grid):
        for sizes in [None] if mode.sizes else size_choices(target.space, labels):  # type: ignore[arg-type]
            starts.append((gen.start(labels), sizes))
    counts: Counter = Counter()
    if len(starts) == 1 and starts[0][1] is None:
        found, rest = gen.explore([starts[0][0]], INLINE_STATES)
        counts.update(gen.stats)
        if rest:
            chunks = [rest[k::pool.n * 8] for k in range(min(len(rest), pool.n * 8))]
            for f, c in pool.map(generate_task, [(target, limits, deadline, mode, ch) for ch in chunks]):
                found.extend(f)
                counts.update(c)
    else:  # one structure search per concrete choice, each run to the end in one task
        found = []
        for (_, sizes), (f, c) in zip(starts, pool.map(generate_task, [(target, limits, deadline, mode, [s])
                                                                        for s, _ in starts])):
            found.extend(replace(st, sizes=sizes) for st in f)
            counts.update(c)
    found.sort(key=Structure.key)
    stats["generate"] = dict(sorted(counts.items())) | {"starts": len(starts), "structures": len(found),
                                                        "seconds": time.time() - t0}
    return found


def _instantiate(structures: list[Structure], mode: Modes, limits: Limits, stats: dict) -> list[tuple[Structure, Mapping]]:
    t0 = time.time()
    pairs: list[tuple[Structure, Mapping]] = []
    seen: set = set()
    counts = Counter()
    for st in structures:
        problem = st.problem()
        for m in enumerate_mappings(problem, limits.max_grid):
            if mode.code != "SSS" and not matches_fixed(st, problem, m):
                continue
            counts["enumerated"] += 1
            key = (st.key()[:4], m, st.sizes)
            if key in seen:  # concrete omap choices can repeat a (structure, mapping)
                continue
            seen.add(key)
            if not m.loop and st.sizes is None:
                # No loop: accumulators are identities, so structures that differ only in where they
                # accumulate are one kernel; the first (smallest) in canonical order stands for all.
                loop_free = ("loop-free", _loop_free_key(st), m)
                if loop_free in seen:
                    counts["loop_free_duplicates"] += 1
                    continue
                seen.add(loop_free)
            pairs.append((st, m))
    stats["instantiate"] = {"structures": len(structures), "mappings": counts["enumerated"],
                            "loop_free_duplicates": counts["loop_free_duplicates"], "candidates": len(pairs),
                            "seconds": time.time() - t0}
    return pairs


def _loop_free_key(st: Structure) -> tuple:
    """What a structure computes when its accumulators are identities: the saved terms, and the
    kernel-level result over them (so the order the outputs are saved in does not matter)."""
    values: list = [("saved", st.graph.terms[o]) for o in st.outputs]
    for op in st.kernel_ops:
        values.append(mk(op.op, op.attrs, *(values[i] for i in op.inputs)))
    return tuple(sorted(map(repr, values[: len(st.outputs)]))), values[-1]


def _check(graph: KernelGraph, pairs, verify, verify_timeout, numeric: bool, prefilter: bool, deadline: float,
           pool: Workers, stats: dict, target) -> list[SymbolicGraph]:
    t0 = time.time()
    doc = serialize.dumps(graph)
    chunks = [pairs[k:k + CHUNK] for k in range(0, len(pairs), CHUNK)]
    results: list[dict] = []
    tasks = [(doc, verify, verify_timeout, numeric, prefilter, deadline, ch) for ch in chunks]
    for out in pool.map(check_task, tasks):
        results.extend(out)
    v = Counter()
    graphs, events = [], []
    names = [t.name for t in graph.inputs]
    for (st, m), rec in zip(pairs, results):
        if rec["skipped"]:
            v["skipped"] += 1
            continue
        v["prefilter_seconds"] += rec["prefilter_s"]
        if rec.get("prefiltered"):
            v["prefiltered"] += 1
            continue
        v["checked"] += 1
        v["verify_seconds"] += rec["verify_s"]
        v["errors"] += rec.get("error", False)
        if not rec["equal"]:
            v["rejected"] += 1
            continue
        v["verified"] += 1
        if numeric:
            v["cross_checked"] += 1
            v["cross_check_seconds"] += rec["check_s"]
            if not rec["numeric_ok"]:
                sg = SymbolicGraph(st, m)
                events.append({"reference": render(target.root, names),
                               "candidate": render(st.graph.terms[st.outputs[0]], names) if not st.kernel_ops
                               else sg.describe(names),
                               "graph": sg.describe(names), "verifier": rec["reason"],
                               "max_error": rec["numeric_error"], "detail": rec["numeric_detail"]})
                continue
        graphs.append(SymbolicGraph(st, m))
    if any(g.structure.sizes is not None for g in graphs):  # Mirage mode: one result per graph, any size
        unique = {}
        for g in graphs:
            unique.setdefault((g.structure.key()[:4], g.mapping), g)
        graphs = list(unique.values())
    graphs.sort(key=SymbolicGraph.key)
    stats["prefilter"] = {"enabled": prefilter, "rejected": v["prefiltered"], "seconds": v["prefilter_seconds"]}
    stats["verify"] = {k: v[k] for k in ("checked", "verified", "rejected", "errors", "skipped")} | \
        {"seconds": v["verify_seconds"]}
    stats["cross_check"] = {"checked": v["cross_checked"], "unsound": len(events), "events": events,
                            "seconds": v["cross_check_seconds"]}
    stats["check_wall_seconds"] = time.time() - t0
    return graphs
