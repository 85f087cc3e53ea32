"""Soundness fuzzing at scale: is everything the verifier proves numerically true?

Candidates are well-formed mutants of every workload's hand-written fused µGraph (at small sizes), and of
the attention workloads' online (running-max) forms, their split-KV forms with partials (group sums), and
their safe split-KV forms (online splits rescaled to the largest max, "+safe_split"):
  terms  the fused graph's verification term edited 1-3 times (`prism.verify.fuzz.mutate`: a dim, a
         parallel dim, an op of the same family, operand order, a dropped parallel op, a constant),
         checked against the program's term in batches (`egraph.check_all`);
  maps   the fused graph with its imaps/fmaps/omaps redrawn (`prism.verify.fuzz.random_maps`), checked
         end to end by `prism.verify.equivalent`;
  constrained  the split-KV forms right only under size constraints (prism.workloads.constrained, classes
         A-D, and the search's walk and group forms of attention at the same config, "searched walk" and
         "searched group"), built at sizes drawn from each class's sweep, then with their maps redrawn (sizes
         kept) or one node edited (`prism.verify.fuzz.mutants`), checked by
         `prism.verify.equivalent(..., constrained=True)` (proved for all sizes, or under the size constraints
         it derives).
Every candidate, proved or not, is also evaluated numerically (terms: `prism.verify.model` at two
choices of parallel sizes; maps: `prism.verify.numeric.random_test` in the reference executor; constrained:
the same, at sizes that satisfy the constraints the proof states), so the table counts proved, numerically
equal, and unsound (proved but numerically different) candidates, and how many were distinct graphs.

    PYTHONPATH=. python benchmarks/fuzz_soundness.py --mutants 100000 --maps 5000 --constrained 10000 --workers 2

Seeded: the same arguments draw the same candidates. Prints a markdown table; --json writes the counts.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import torch

BATCH = 16
CHUNK = 500


def _sizes(pdims, choice: int) -> dict[str, int]:
    """Two size choices, every parallel size > 1: all 2, then the loops 4."""
    return {p: 4 if choice and p.startswith("i") else 2 for p in pdims}


def _numeric(cand, ref_values, env) -> str:
    """'equal', 'different', or 'not evaluable' (no size choice divides the candidate's extents)."""
    from prism.verify.expr import pdims_of
    from prism.verify.model import IllFormed, evaluate, same_value

    seen = False
    for choice, want in enumerate(ref_values):
        try:
            got = evaluate(cand, env, _sizes(pdims_of(cand), choice))
        except IllFormed:
            continue
        seen = True
        if not same_value(got, want):
            return "different"
    return "equal" if seen else "not evaluable"


def _form(label: str):
    """(workload, small config, its program, the fused form `label` names: "NAME", "NAME+online",
    "NAME+partials" (the attention forms' fused_params of that name set) or "NAME+safe_split" (online with
    partials, at the default split: terms do not depend on sizes, and random maps run at sizes of their own))."""
    from prism import workloads

    name, _, variant = label.partition("+")
    w = workloads.get(name)
    cfg = w.small_config
    params = SAFE_SPLIT if variant == "safe_split" else {variant: True} if variant else {}
    return w, cfg, w.build(cfg), w.fused(cfg, **params)


SAFE_SPLIT = {"online": True, "partials": True}


def term_task(label: str, seed: int, count: int) -> tuple[Counter, list[str], float, set[str]]:
    """`count` term mutants of fused form `label`, drawn with `seed`."""
    from prism.verify.egraph import check_all
    from prism.verify.encode import encode
    from prism.verify.fuzz import mutate
    from prism.verify.instances import random_env
    from prism.verify.model import evaluate

    _, _, program, fused_graph = _form(label)
    (ref,) = encode(program).outputs
    (fused,) = encode(fused_graph).outputs
    env = random_env({f"in{k}": t.shape for k, t in enumerate(program.inputs)}, seed=seed)
    ref_values = [evaluate(ref, env, {}) for _ in range(2)]
    rng = random.Random(seed)
    counts, unsound, seen = Counter(), [], set()
    start = time.perf_counter()
    pending = []
    for k in range(count):
        cand = fused
        for _ in range(rng.randint(1, 3)):
            cand = mutate(cand, rng) or cand
        pending.append(cand)
        seen.add(str(cand))
        if len(pending) == BATCH or k == count - 1:
            for cand, res in zip(pending, check_all(ref, pending, timeout=2.0)):
                _tally(counts, unsound, res.equal, res.reason, _numeric(cand, ref_values, env), f"{cand}")
            pending = []
    return counts, unsound, time.perf_counter() - start, seen


def map_task(label: str, seed: int, count: int) -> tuple[Counter, list[str], float, set[str]]:
    """`count` random maps of fused form `label` (a third uniform, the rest near it)."""
    from prism.verify import equivalent
    from prism.verify.fuzz import random_maps
    from prism.verify.numeric import random_test

    _, _, program, fused = _form(label)
    rng = random.Random(seed)
    counts, unsound, seen = Counter(), [], set()
    start = time.perf_counter()
    for k in range(count):
        cand = random_maps(fused, rng, keep=0.0 if k % 3 == 0 else 0.8)
        seen.add(cand.structural_hash())
        verdict = equivalent(program, cand)
        num = random_test(program, cand, seed=seed + k)
        # equal only at sizes of 1 (the only ones that fit) says nothing about the maps
        numeric = "different" if not num.equal else "equal" if num.all_varied else "not evaluable"
        _tally(counts, unsound, verdict.equal, verdict.reason, numeric, str(cand))
    return counts, unsound, time.perf_counter() - start, seen


def constrained_task(label: str, seed: int, count: int) -> tuple[Counter, list[str], float, set[str]]:
    """`count` candidates near class `label` of prism.workloads.constrained: the class built at sizes drawn from
    its sweep (or its mutant), then its maps redrawn with those sizes kept (a third uniform, the rest near it) or
    one node edited; each proved (constrained=True) and run at sizes its verdict's constraints allow."""
    from prism.errors import GraphError
    from prism.verify import equivalent
    from prism.verify.fuzz import mutants, random_maps
    from prism.verify.numeric import random_test
    from prism.workloads import constrained, get

    program = get("attention").build(constrained.CFG)
    if label in SEARCHED:
        build, sweep = _searched(program, label)
    else:
        build, sweep = constrained.CLASSES[label].build, constrained.CLASSES[label].sweep
    rng = random.Random(seed)
    counts, unsound = Counter(), []
    start = time.perf_counter()
    seen: set[str] = set()
    for k in range(count):
        while True:
            try:
                mutant = {"mutant": rng.random() < 0.2} if label not in SEARCHED else {}   # a class's wrong variant
                base = build(constrained.CFG, *(rng.choice(s) for s in sweep), **mutant)
                if rng.random() < 0.5:
                    cand = random_maps(base, rng, keep=0.0 if k % 3 == 0 else 0.8, keep_sizes=True)
                else:
                    cand = rng.choice([g for _, g in mutants(base)] or [base])
                break
            except GraphError:   # sizes the class does not build at, or maps that do not fit them
                continue
        seen.add(cand.structural_hash())
        verdict = equivalent(program, cand, constrained=True)
        counts["proved under constraints"] += bool(verdict.equal and verdict.constraints)
        if verdict.equal:
            cand.constraints = verdict.constraints
        num = random_test(program, cand, seed=seed + k)
        numeric = "different" if not num.equal else "equal" if num.all_varied else "not evaluable"
        _tally(counts, unsound, verdict.equal, verdict.reason, numeric, str(cand))
    return counts, unsound, time.perf_counter() - start, seen


SEARCHED = {"searched walk": "walk", "searched group": "group"}
"""Constrained classes drawn from the search's own forms: each kind's graphs of attention at the classes' config."""


@functools.cache
def _searched_result(program_doc: str):
    """The search's result for the program (as JSON), once per worker process: its tasks share it."""
    from prism.ir import KernelGraph, serialize
    from prism.search import search

    return search(serialize.loads(program_doc, KernelGraph), workers=1, max_grid=2)


def _searched(program, label: str):
    """(build(cfg, sizes...), sweep) over the search's graphs of kind SEARCHED[label]: the first size picks the
    graph, the others its grid sizes and loop range (a MappingError, a GraphError, where its tiles do not fit)."""
    from prism.ir import serialize

    result = _searched_result(serialize.dumps(program))
    graphs = [i for i, sg in enumerate(result.graphs) if getattr(sg.mapping, SEARCHED[label])]

    def build(cfg, pick, x, y, loop):
        sg = result.graphs[graphs[pick]]
        return result.instantiate(graphs[pick], grid=(x, y)[:sg.n_grid], loop=loop if sg.mapping.loop else 1)
    return build, [range(len(graphs)), (1, 2, 4), (1, 2, 4), (1, 2, 4)]


def _tally(counts: Counter, unsound: list[str], proved: bool, reason: str, numeric: str, what: str) -> None:
    counts["candidates"] += 1
    counts["proved"] += proved
    counts["type or shape refused"] += not proved and (reason.startswith("not equal: [")
                                                       or "not a valid µGraph" in reason)
    counts[f"numerically {numeric}"] += 1
    if proved and numeric == "different":
        counts["unsound"] += 1
        unsound.append(what)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutants", type=int, default=100_000, help="term mutants in all (split over workloads)")
    ap.add_argument("--maps", type=int, default=5_000, help="random maps in all (split over workloads)")
    ap.add_argument("--constrained", type=int, default=0,
                    help="candidates near the forms right under size constraints, in all (split over classes A-D)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--forms", help="comma-separated subset of the forms (default: all of them)")
    args = ap.parse_args()
    from prism import workloads

    names = [*workloads.names(), *(f"{n}+{v}" for v in ("online", "partials", "safe_split") for n in ("attention", "qk_attention"))]
    if args.forms:
        unknown = set(args.forms.split(",")) - set(names)
        if unknown:
            raise SystemExit(f"fuzz_soundness: unknown form(s) {sorted(unknown)}; known: {', '.join(names)}")
        names = args.forms.split(",")
    from prism.workloads.constrained import CLASSES

    tasks = []
    for kind, total, fn, forms in (("terms", args.mutants, term_task, names), ("maps", args.maps, map_task, names),
                                   ("constrained", args.constrained, constrained_task, [*CLASSES, *SEARCHED])):
        per = total // len(forms)
        for i, name in enumerate(forms):
            for j, start in enumerate(range(0, per, CHUNK)):
                tasks.append((kind, name, fn, args.seed + 1000 * i + j, min(CHUNK, per - start)))
    t0 = time.perf_counter()
    rows: dict[tuple[str, str], Counter] = {}
    distinct: dict[tuple[str, str], set[str]] = {}
    seconds: Counter = Counter()
    unsound: list[str] = []
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=torch.set_num_threads, initargs=(1,)) as pool:
        futures = [(kind, name, pool.submit(fn, name, seed, n)) for kind, name, fn, seed, n in tasks]
        for kind, name, f in futures:
            c, bad, s, seen = f.result()
            rows.setdefault((kind, name), Counter()).update(c)
            distinct.setdefault((kind, name), set()).update(seen)
            seconds[(kind, name)] += s
            unsound += bad
    wall = time.perf_counter() - t0
    cols = ["candidates", "distinct", "proved", "proved under constraints", "numerically equal",
            "numerically different", "numerically not evaluable", "type or shape refused", "unsound"]
    print(f"| kind | workload | {' | '.join(cols)} | checks/s per worker |")
    print("|---|---|" + "---|" * (len(cols) + 1))
    total = Counter()
    for (kind, name), c in sorted(rows.items()):
        c["distinct"] = len(distinct[(kind, name)])
        total.update(c)
        rate = c["candidates"] / seconds[(kind, name)]
        print(f"| {kind} | {name} | " + " | ".join(str(c[k]) for k in cols) + f" | {rate:.0f} |")
    print("| all | | " + " | ".join(str(total[k]) for k in cols) + f" | {total['candidates'] / wall:.0f} (wall, "
          f"{args.workers} workers) |")
    print(f"\n{total['candidates']} candidates in {wall:.0f} s; unsound: {total['unsound']}")
    for u in unsound[:10]:
        print("UNSOUND:", u)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total": dict(total), "rows": {f"{k}/{n}": dict(c) for (k, n), c in rows.items()},
                       "seconds": wall, "unsound": unsound, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
