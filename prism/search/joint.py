"""Joint forms: one kernel that writes several outputs of a program (a norm's Q, K and V projections).

Each output's part of the program (`KernelGraph.output_cone`) is searched on its own; a joint form lays one
verified sGraph of each part side by side in one block graph over the program's inputs:
  - a loader of an input two parts read is one loader, and an op two parts compute from the same values is
    computed once (the sum of squares that Q, K and V all divide by, accumulated once);
  - the parts share the grid and the loop: a grid dim of the kernel splits what each part's matching dim
    split (Q's columns and K's, side by side in each block), so parts must split what they share the same
    way. Grid dims are interchangeable, so a part's dims may match the first part's in any order.
This is done on raw maps (per loader, the data dim each grid dim and the loop split; per saved tensor, the
data dim each grid dim concatenates along), which name data dims, not a search's classes: the parts must
agree on every loader they share, and the whole must satisfy the mapping constraints
(`MappingProblem.canonical`: one partitioning per class, outputs of the program's full extent).
Forms come first where every part has the same form as the first (the parts of Q, K and V are one
program on different weights, so form k of each), then any other that agrees; at most `limit`.

What this module makes are candidates, not results: the search checks them like any other (the prefilter,
the verifier proving every output equal to its part of the program for all parallel sizes, and the numeric
cross-check; prism.search.driver).
"""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

from prism.ir import KernelGraph
from prism.search.result import SymbolicGraph
from prism.symbolic.dims import AtomSpace, InvExtent
from prism.symbolic.draft import LOAD_OP, BOp, Draft
from prism.symbolic.mapping import Mapping, RawMapping
from prism.symbolic.structure import Structure

__all__ = ["Part", "groups", "joint_forms"]

Part = tuple[Sequence[SymbolicGraph], Sequence[int]]
"""One output's verified graphs, and the index among the joint program's inputs of each input they read."""


def joint_forms(space: AtomSpace, parts: Sequence[Part], limit: int = 64, same: bool = False
                ) -> list[tuple[Structure, Mapping]]:
    """Up to `limit` joint forms of `parts` (one per output, in output order) over the inputs of `space`,
    each once, in the order the module docstring gives; with `same`, only those of one form in every part."""
    lifts = [lift for _, lift in parts]
    if {i for lift in lifts for i in lift} != set(range(len(space.shapes))):
        return []   # an input no part reads: no loader of its own in a joint form
    found: dict[tuple, tuple[Structure, Mapping]] = {}
    made: dict[tuple, tuple[Structure, list[int]] | None] = {}
    for combo, raws in _agreeing(parts, same):
        if len(found) >= limit:
            break
        if combo not in made:
            made[combo] = _structure(space, combo, lifts)
        if made[combo] is None:
            continue
        st, saved_parts = made[combo]  # type: ignore[misc]
        raw = _joint_raw(raws, lifts, saved_parts)
        mapping = None if raw is None else st.problem().canonical(raw)
        if mapping is not None:
            found.setdefault((st.key(), mapping), (st, mapping))
    return list(found.values())


def groups(graph: KernelGraph, parts: Sequence[Sequence[SymbolicGraph]]) -> list[tuple[int, ...]]:
    """The program's outputs in groups to search jointly (each output in one group, groups in output order):
    an output joins the first group each of whose outputs' parts has a form in common with its own that
    makes a joint form (Q, K and V of one norm: one program on three weights); any other output is a group
    of its own. Forms of different programs can join too (`prism.search.join` tries them all), but a group
    of outputs whose parts share no form would mostly take the grid that suits none of them."""
    reads = [graph.output_cone(k)[1] for k in range(len(parts))]   # each part's inputs, made once
    found: list[list[int]] = []
    for k in range(len(parts)):
        home = next((g for g in found if all(_share(graph, parts, reads, (m, k)) for m in g)), None)
        if home is None:
            found.append([k])
        else:
            home.append(k)
    return [tuple(g) for g in found]


def _share(graph: KernelGraph, parts: Sequence[Sequence[SymbolicGraph]], reads: Sequence[Sequence[int]],
           outputs: Sequence[int]) -> bool:
    """Whether some form is common to these outputs' parts (reading the program's inputs `reads[k]`) and makes
    a joint form of them."""
    sub, used = graph.outputs_cone(list(outputs))
    space = AtomSpace(tuple(t.shape for t in sub.inputs))
    lifted = [(parts[k], [used.index(j) for j in reads[k]]) for k in outputs]
    return bool(joint_forms(space, lifted, limit=1, same=True))


def _agreeing(parts: Sequence[Part], same: bool) -> Iterator[tuple[tuple[SymbolicGraph, ...], list[RawMapping]]]:
    """One graph per part, each with its raw maps (its grid dims matched with the first part's in some order),
    where every input two parts load is loaded the same way: first each form of the first part with the same
    form of every other part, then every other such choice, depth first (a choice that disagrees is dropped
    before any later part is tried). Graphs with partials or a tail are left out: their second kernel holds
    one output's sums. A part's graphs are taken fewest kernel-level ops first (stable): a joint form runs them
    once per output after its kernel, so forms that finish inside it come before those limits cut."""
    plain = [sorted(((g, g.structure.problem().raw(g.mapping)) for g in graphs if not g.mapping.partials),
                    key=lambda option: len(option[0].structure.kernel_ops))
             for graphs, _ in parts]
    lifts = [lift for _, lift in parts]
    by_key = [{g.key(): (g, raw) for g, raw in options} for options in plain]
    twins = [tuple(keys[g.key()] for keys in by_key) for g, _ in plain[0] if all(g.key() in keys for keys in by_key)]

    def extend(chosen: tuple, loaded: dict[int, tuple], options: Sequence[Sequence[tuple]]) -> Iterator:
        p = len(chosen)
        if p == len(options):
            yield tuple(g for g, _ in chosen), [raw for _, raw in chosen]
            return
        for g, raw in options[p]:
            if chosen and raw.k != chosen[0][1].k:
                continue
            for perm in itertools.permutations(range(raw.k)) if chosen else [tuple(range(raw.k))]:
                moved = _permuted(raw, perm)
                rows = dict(loaded)
                if all(rows.setdefault(lifts[p][i], r) == r for i, r in enumerate(zip(moved.imaps, moved.fmaps))):
                    yield from extend(chosen + ((g, moved),), rows, options)

    for twin in twins:
        yield from extend((), {}, [[option] for option in twin])
    if not same:
        taken = {tuple(g for g, _ in twin) for twin in twins}
        yield from (found for found in extend((), {}, plain) if found[0] not in taken)


def _permuted(raw: RawMapping, perm: Sequence[int]) -> RawMapping:
    """`raw` with its grid dim p moved to `perm[p]`."""
    def move(row: tuple) -> tuple:
        out = [None] * raw.k
        for p, d in enumerate(row):
            out[perm[p]] = d
        return tuple(out)
    return RawMapping(raw.k, tuple(map(move, raw.imaps)), raw.fmaps, tuple(map(move, raw.omaps)))


def _structure(space: AtomSpace, combo: Sequence[SymbolicGraph], lifts: Sequence[Sequence[int]]
               ) -> tuple[Structure, list[int]] | None:
    """The parts' structures replayed into one over `space` (shared loaders, an op with the same operands
    and attributes computed once), with the joint saved tensor each part's saved tensor became (in part
    order); None where an op does not replay (dims two parts match differently)."""
    g = Draft.start(space)
    made: dict[tuple, int] = {}
    saved: list[int] = []      # the joint saved tensors
    saved_parts: list[int] = []  # per part saved tensor, in part order: its index in `saved`
    kops: list[BOp] = []
    results = []
    for sg, lift in zip(combo, lifts):
        st = sg.structure
        index: list[int] = []
        for op in st.graph.ops:
            if op.op == LOAD_OP:
                index.append(lift[op.attrs[0]])
                continue
            bop = BOp(op.op, tuple(index[i] for i in op.inputs), tuple(_lifted(a, lift) for a in op.attrs))
            key = (bop.op, bop.inputs, bop.attrs)
            if key not in made:
                nxt = g.extend(bop)
                if isinstance(nxt, str):
                    return None
                g, made[key] = nxt, len(g.ops)
            index.append(made[key])
        values = []
        for o in st.outputs:
            if index[o] not in saved:
                saved.append(index[o])
            saved_parts.append(saved.index(index[o]))
            values.append(("saved", saved.index(index[o])))
        for op in st.kernel_ops:
            kops.append(BOp(op.op, tuple(values[i] for i in op.inputs), tuple(_lifted(a, lift) for a in op.attrs)))
            values.append(("kernel", len(kops) - 1))
        results.append(values[st.values[0]])

    def number(v: tuple) -> int:
        return v[1] if v[0] == "saved" else len(saved) + v[1]
    ops = tuple(BOp(o.op, tuple(number(v) for v in o.inputs), o.attrs) for o in kops)
    return Structure(g, tuple(saved), ops, results=tuple(number(v) for v in results)), saved_parts


def _joint_raw(raws: Sequence[RawMapping], lifts: Sequence[Sequence[int]], saved_parts: Sequence[int]
               ) -> RawMapping | None:
    """The joint raw mapping: each input's loader rows (the parts agree), each joint saved tensor's row (from
    the parts that saved it); None where two parts save one tensor concatenated two ways."""
    loaders = {lift[i]: row for raw, lift in zip(raws, lifts) for i, row in enumerate(zip(raw.imaps, raw.fmaps))}
    saved: dict[int, tuple] = {}
    for j, row in zip(saved_parts, [row for raw in raws for row in raw.omaps]):
        if saved.setdefault(j, row) != row:
            return None
    return RawMapping(raws[0].k, tuple(loaders[i][0] for i in range(len(loaders))),
                      tuple(loaders[i][1] for i in range(len(loaders))), tuple(saved[j] for j in range(len(saved))))


def _lifted(a: object, lift: Sequence[int]) -> object:
    """An op attribute over a part's inputs, over the joint program's (1/N names an input's dim)."""
    return InvExtent(lift[a.index], a.dim) if isinstance(a, InvExtent) else a
