"""The search's forms that compute the program only for some parallel sizes (classes B and D, made from
each verified partials graph: prism.symbolic.structure.walk_variant and group_variant), proved under the size
constraints their proofs need, run at sizes inside them, refused outside them, and shown in a tuning report.

The hand-written classes A-D and their mutants are tests/verify/test_size_constraints.py; the kernels these forms
generate run under Triton's interpreter in tests/codegen (cases searched_split_kv_walk and _group)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import prism.workloads as wl
from prism import interp, verify
from prism.errors import MappingError
from prism.ir.graph import check_sizes, parallel_sizes
from prism.ir.sizes import violations
from prism.search.result import SearchResult, SymbolicGraph
from prism.symbolic.structure import GROUP, group_variant, walk_variant
from prism.tune import tune

FORMS = {"walk": "partials+walk (class D)", "group": "partials+group (class B)"}


def _forms(result: SearchResult, kind: str) -> list[int]:
    return [i for i, sg in enumerate(result.graphs) if getattr(sg.mapping, kind)]


@pytest.mark.parametrize("name", ["attention", "gqa"])
def test_the_search_finds_walk_and_group_forms_each_proved_under_its_constraint(searched, name):
    w, cfg, result = searched(name)
    assert result.stats["cross_check"]["unsound"] == 0
    for kind, words in (("walk", "i1 = "), ("group", " divides ")):
        found = _forms(result, kind)
        assert found, f"no {kind} form of {name}"
        for i in found:
            sg = result.graphs[i]
            (c,) = sg.constraints
            assert words in str(c)
            plain = dataclasses.replace(sg.mapping, walk=False, group=0)
            assert any(g.structure is sg.structure and g.mapping == plain for g in result.graphs), \
                "a variant of a partials graph the search did not verify"
            assert "not a valid µGraph for all parallel sizes" in verify.equivalent(w.build(cfg),
                                                                                   result.instantiate(i)).reason


def _at(sg: SymbolicGraph, splits: int) -> tuple[str, tuple[int, ...]]:
    """The grid dim that splits the keys into partials, and a grid with `splits` along it (1 elsewhere)."""
    (p,), = [fold.keys() for fold in sg.structure.problem().partials(sg.mapping)[:1]]
    return p, tuple(splits if d == p else 1 for d in "xyz"[:sg.n_grid])


def test_a_walk_form_runs_its_second_kernel_s_loop_once_per_split(searched):
    w, cfg, result = searched("attention")
    for i in _forms(result, "walk"):
        sg = result.graphs[i]
        p, grid = _at(sg, 2)
        g = result.instantiate(i, grid=grid, loop=2 if sg.mapping.loop else 1)
        first, second = g.blocks
        assert first.grid_size(p) == second.loop == 2
        assert [str(c) for c in g.constraints] == [f"i1 = {p}0"]
        assert not [n for _, n in second.topo() if n.op in ("group_sum", "group_scale")]   # the loop sums them
        check_sizes(g)
        inputs = w.inputs(cfg, dtype=torch.float64, seed=3)
        (got,) = interp.run(g, inputs, torch.float64)
        assert torch.allclose(got, w.reference(*inputs), rtol=1e-9, atol=1e-9)


def test_a_group_form_sums_each_tile_in_groups_and_its_tiles_must_hold_whole_groups(searched):
    w, cfg, result = searched("attention")
    inputs = w.inputs(cfg, dtype=torch.float64, seed=4)
    for i in _forms(result, "group"):
        sg = result.graphs[i]
        _, grid = _at(sg, cfg["h"] // GROUP)     # the most splits that leave each tile one whole group
        g = result.instantiate(i, grid=grid, loop=1)
        assert [n.attrs["size"] for _, n in g.blocks[0].topo() if n.op == "group_sum"] == [GROUP]
        assert not violations(g.constraints, parallel_sizes(g))
        (got,) = interp.run(g, inputs, torch.float64)
        assert torch.allclose(got, w.reference(*inputs), rtol=1e-9, atol=1e-9)
        with pytest.raises(MappingError, match=f"does not hold whole groups of {GROUP}"):
            result.instantiate(i, grid=tuple(2 * n for n in grid), loop=1)


def test_variants_are_made_only_of_plain_partials_mappings_with_what_they_need(searched):
    """A tail, walk or group mapping has no further variant; a graph with online sums (each split's sums scaled
    by its own maximum) has neither walk form nor grouped sums (prism.symbolic.structure.grouped_sums says why)."""
    _, _, result = searched("attention")
    for sg in result.graphs:
        st, m = sg.structure, sg.mapping
        if not m.partials or m.tail or m.walk or m.group:
            assert walk_variant(st, m) is None and group_variant(st, m) is None
        elif any(st.graph.ops[o].op == "accum_online" for o in st.outputs):
            assert walk_variant(st, m) is None and group_variant(st, m) is None


def test_the_forms_travel_through_json(searched):
    _, _, result = searched("gqa")
    again = SearchResult.from_json(result.to_json())
    for kind in FORMS:
        for i in _forms(result, kind):
            a, b = again.graphs[i], result.graphs[i]
            assert (a.key(), a.mapping, a.constraints) == (b.key(), b.mapping, b.constraints) and a.constraints
    assert SymbolicGraph.from_json(result.graphs[_forms(result, "walk")[0]].to_json()).mapping.walk


def test_the_tuning_report_shows_each_form_s_best_estimate(searched):
    w, cfg, result = searched("attention")
    report = tune(result, w.build(cfg), budget=2, workers=1, compile=False).report
    for form in FORMS.values():
        assert form in report.forms
        best = report.forms[form]
        assert best["estimate_us"] > 0 and best["graphs"] == len(_forms(result, form.split("+")[1].split()[0]))
        assert best["graphs"] and f"{form} ({best['graphs']} sGraphs) {best['estimate_us']:.2f} us" in \
            report.summary()
    assert type(report).from_json(report.to_json()).forms == report.forms


def test_the_later_kernels_sizes_follow_from_the_first_kernels_grid_alone(searched):
    """What the tuner's space relies on to read a constrained form's later sizes once per grid (Space.broken)."""
    from prism.ir.sizes import kernel_of
    from prism.tune.space import Space

    w, cfg, result = searched("attention")
    space = Space(result, w.build(cfg))
    checked = 0
    for gs in space.graphs:
        if not gs.sgraph.mapping.partials:
            continue
        by_grid: dict = {}
        for grid, loop in gs.tilings():
            later = {n: v for n, v in parallel_sizes(result.instantiate(gs.index, grid=grid, loop=loop)).items()
                     if kernel_of(n)[1] > 0}
            assert by_grid.setdefault(grid, later) == later
            checked += 1
        assert not any(gs.broken(grid, loop) for grid, loop in gs.tilings())
    assert checked > 100


@pytest.mark.parametrize("name", ["attention", "gqa"])
def test_the_later_sizes_a_mapping_gives_are_those_its_instantiation_has(searched, name, monkeypatch):
    """`later_sizes` (a walk's loop, a partials form's single pass) is what `instantiate` builds at every grid, and the
    space keeps the same tilings reading them so as reading every later size off an instantiation."""
    from prism.ir.sizes import kernel_of
    from prism.symbolic import structure
    from prism.tune.space import Space

    w, cfg, result = searched(name)
    program = w.build(cfg)
    space = Space(result, program)
    walks = checked = 0
    for gs in space.graphs:
        sg = gs.sgraph
        for grid, loop in gs.tilings()[::7]:
            given = structure.later_sizes(sg.structure, sg.mapping, grid)
            later = {n: v for n, v in parallel_sizes(result.instantiate(gs.index, grid=grid, loop=loop)).items()
                     if kernel_of(n)[1] > 0}
            assert given == {n: later[n] for n in given}, sg.form
            checked += 1
            walks += sg.mapping.walk and given["i1"] > 1
    assert checked > 100 and walks > 10
    kept = [gs.tilings() for gs in space.graphs]
    monkeypatch.setattr(structure, "later_sizes", lambda st, m, grid: {})
    monkeypatch.setattr("prism.tune.space.later_sizes", lambda st, m, grid: {})
    assert [gs.tilings() for gs in Space(result, program).graphs] == kept
