"""Parameter spaces: every point instantiates, every constraint holds, sampling is uniform and seeded."""

from __future__ import annotations

import itertools
import math

import pytest

import prism.workloads as wl
from prism.codegen.layout import Layout, Padded
from prism.codegen.one_op import to_custom
from prism.errors import MappingError
from prism.ir import Launch
from prism.tune.space import (GEMV_PER_THREAD, GEMV_ROWS, MAX_NUMEL, STAGE_VALUES, TRITON_STAGES, WARPS, Candidate,
                              Space)
from prism.tune.target import H100


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _spaces(searched, name):
    """The space of the small search result at its own small config and at a real config (a saved
    search re-instantiated at other sizes; d=1024, since the test-limited searches keep only graphs
    whose whole-column tiles of a 4096-wide weight exceed shared memory)."""
    w, cfg, result = searched(name)
    real = {("n", "d"): {"n": 8, "d": 1024}, ("n", "d", "o"): {"n": 2, "d": 1024, "o": 1536}}.get(w.dims,
                                                                                               w.configs[0])
    return [Space(result, w.build(cfg)), Space(result, w.build(real))]


ODD = {"rmsnorm": {"n": 5, "d": 1000}, "attention": {"b": 2, "g": 4, "h": 1000, "d": 64}}
"""Sizes whose tiles are ragged (the last one partial) at some points."""


@pytest.mark.parametrize("name", wl.names())
def test_the_cost_models_padded_tiles_are_code_generations(searched, name):
    """The cost model pads every tile as code generation lays it out (`Padded` against `Layout`), on each
    kernel of sampled points, ragged ones included."""
    spaces = _spaces(searched, name)
    if name in ODD:
        spaces.append(Space(searched(name)[2], wl.get(name).build(ODD[name])))
    blocks = 0
    for space in spaces:
        for c in space.sample(15, seed=3):
            lowered, _ = to_custom(space.instantiate(c))
            for _, node in lowered.topo():
                if node.op == "custom":
                    block = node.attrs["block"]
                    layout = Layout(block, [f"in{k}" for k in range(len(block.input_types))])
                    padded = Padded(block)
                    assert [padded.shape(i) for i in range(len(block.nodes))] == \
                        [layout.shape(i) for i in range(len(block.nodes))], c
                    blocks += 1
    assert blocks >= 15


@pytest.mark.parametrize("name", wl.names())
def test_every_sampled_point_instantiates_and_respects_every_constraint(searched, name):
    for space in _spaces(searched, name):
        assert len(space) > 0
        for c in space.sample(40, seed=7):
            assert space.violations(c) == []
            kg = space.instantiate(c)                      # never MappingError
            block = kg.blocks[0]                           # a partials form's second kernel sums its groups
            assert block.grid == c.grid and block.loop == c.loop
            assert all(b.launch == Launch(c.warps, c.stages, tail=b.launch.tail, gemv=c.gemv) for b in kg.blocks)
            tail = space.result.graphs[c.graph].mapping.tail
            assert [b.launch.tail for b in kg.blocks] == ([False, True] if tail else [False] * len(kg.blocks))
            assert math.prod(block.grid) <= H100.max_blocks
            assert all(g <= H100.max_grid_yz for g in block.grid[1:])
            for i in block.loaders:
                node = block.nodes[i]
                full = block.input_types[node.attrs["index"]].shape
                for tile, size in zip(node.outputs[0].shape, full):
                    assert size % tile == 0
                    assert tile == size or _pow2(tile), (c, node.outputs[0].shape, full)
            gs = space.graphs[c.graph]
            fp = gs.footprint(c.grid, c.loop, c.stages)
            assert fp.max_numel <= MAX_NUMEL
            assert c.gemv or fp.smem <= H100.smem_per_block          # a GEMV stages no dot operand
            assert c.gemv or c.warps == 1 or 32 * c.warps <= fp.max_numel
            assert c.stages in (STAGE_VALUES if c.loop > 1 else (TRITON_STAGES,))
            if c.gemv:   # few rows, and a product each thread can hold
                products = [(b.nodes[n.inputs[0][0]].outputs[0].shape, n.outputs[0].shape[-1])
                            for b in kg.blocks for n in b.nodes if n.op == "matmul"]
                assert products and all(a[-2] <= GEMV_ROWS for a, _ in products), c
                assert all(math.prod(a) * n <= GEMV_PER_THREAD * 32 * c.warps for a, n in products), c


@pytest.mark.parametrize("name", wl.names())
def test_padded_tiles_agree_with_code_generation(searched, name):
    """The space's analytic padding (power of two; 16 on tl.dot dims) is what codegen's Layout does, and so is
    its largest tile (which bounds warps and Triton's limit; a tail form's: tests/codegen/test_tail.py)."""
    space = _spaces(searched, name)[1]
    for c in space.sample(25, seed=3):
        block = space.instantiate(c).blocks[0]
        layout = Layout(block, [f"in{k}" for k in range(len(block.input_types))])
        gs = space.graphs[c.graph]
        for k in range(len(gs.ops)):
            assert layout.shape(k) == gs.padded(k, c.grid, c.loop, c.gemv), (c, k)
        if not gs.mapping.tail and not c.gemv:
            largest = max(math.prod(layout.shape(i)) for i in range(len(block.nodes)))
            assert gs.footprint(c.grid, c.loop).max_numel == largest, c


def test_points_are_exactly_the_valid_part_of_the_product(searched):
    """Nothing valid is left out, nothing invalid let in; and the IR agrees about divisibility."""
    w, cfg, result = searched("attention")
    space = Space(result, w.build(cfg))
    for gs in space.graphs:
        pts = set(gs.tilings())
        for values in itertools.product(*(v.values + (v.values[-1] * 2,) for v in gs.variables)):
            grid, loop = tuple(values[:-1]), values[-1]
            why = gs.violations(grid, loop)
            assert ((grid, loop) in pts) == (not why)
            if any("does not split" in r for r in why):
                with pytest.raises(MappingError):
                    result.instantiate(gs.index, w.build(cfg), grid=grid, loop=loop)


def test_launches_are_exactly_the_valid_warps_and_stages(searched):
    """Every tiling's launches are the valid (warps, stages, gemv) of the whole offer and one past it; a loop of
    one iteration has only Triton's default stages; more stages can push a point over shared memory."""
    w, _, result = searched("rmsnorm")
    space = Space(result, w.build(w.configs[1]))
    for gs in space.graphs:
        for grid, loop in gs.tilings():
            launches = set(gs.launches(grid, loop))
            assert launches and gs.n_launches(grid, loop) == len(launches), (grid, loop)
            for warps, stages, gemv in itertools.product(WARPS + (32, 3), STAGE_VALUES + (5,), (False, True)):
                why = gs.violations(grid, loop, warps, stages, gemv)
                assert ((warps, stages, gemv) in launches) == (not why), (grid, loop, warps, stages, gemv, why)
            if loop == 1:
                assert {s for _, s, _ in launches} == {TRITON_STAGES}
    staged = [(gs, grid, loop) for gs in space.graphs for grid, loop in gs.tilings()
              if loop > 1 and gs.footprint(grid, loop, 4).smem > gs.footprint(grid, loop, 2).smem]
    assert staged, "loop-loaded tl.dot operands are staged per pipelining stage"


def test_neighbours_are_valid_points_one_step_away(searched):
    w, _, result = searched("rmsnorm")
    space = Space(result, w.build(w.configs[1]))
    points = set(space.points())
    for c in space.sample(30, seed=5):
        near = space.neighbours(c)
        assert near and c not in near and len(set(near)) == len(near)
        gs = space.graphs[c.graph]
        for n in near:
            assert n in points and n.graph == c.graph
            moved = [k for k, var in enumerate(gs.variables) if (*n.grid, n.loop)[k] != (*c.grid, c.loop)[k]]
            launch = (n.warps, n.stages, n.gemv) != (c.warps, c.stages, c.gemv)
            if moved:                                   # one size to the next or previous of its values
                assert len(moved) == 1 and n.gemv == c.gemv
                k = moved[0]
                values = gs.variables[k].values
                a, b = (*c.grid, c.loop)[k], (*n.grid, n.loop)[k]
                assert abs(values.index(a) - values.index(b)) == 1
                assert n.warps == c.warps
            else:                                       # warps x2 or /2, stages +-1, or dot <-> GEMV
                assert launch
                assert (n.stages == c.stages and n.gemv == c.gemv and n.warps in (c.warps * 2, c.warps // 2)) or \
                    (n.warps == c.warps and n.gemv == c.gemv and abs(n.stages - c.stages) == 1) or \
                    ((n.warps, n.stages) == (c.warps, c.stages) and n.gemv != c.gemv)


def test_adjacent_tilings_are_the_nearest_valid_ones_along_each_size(searched):
    """`adjacent`: along each parallel size, each way, the nearest value that makes a valid tiling with the
    other sizes kept, and nothing else. At RMSNorm-Linear's small config the next value is sometimes not valid
    and the one after it is."""
    w, cfg, result = searched("rmsnorm_linear")
    space = Space(result, w.build(cfg))
    for gs in space.graphs:
        valid = gs.tilings()
        for grid, loop in valid:
            sizes = (*grid, loop)
            want = set()
            for k, var in enumerate(gs.variables):
                others = [t for t in valid if all(x == y for j, (x, y) in enumerate(zip((*t[0], t[1]), sizes))
                                                  if j != k)]
                along = [(*t[0], t[1])[k] for t in others]
                lower, higher = [v for v in along if v < sizes[k]], [v for v in along if v > sizes[k]]
                want |= {t for t in others if (*t[0], t[1])[k] in (max(lower, default=None), min(higher, default=None))}
            assert set(gs.adjacent(grid, loop)) == want, (gs.index, grid, loop)


def test_shared_memory_and_block_caps_bound_the_space(searched):
    w, _, result = searched("rmsnorm")
    program = w.build(w.configs[1])
    full = Space(result, program)
    prints = [full.graphs[c.graph].footprint(c.grid, c.loop, c.stages) for c in full.points()]
    smem = sorted(f.smem for f in prints)[len(prints) // 2]          # caps at the medians
    blocks = sorted(f.blocks for f in prints)[len(prints) // 2]
    small = Space(result, program, target=H100.with_(smem_per_block=smem, max_blocks=blocks))
    assert 0 < len(small) < len(full)
    for c in small.points():
        fp = small.graphs[c.graph].footprint(c.grid, c.loop, c.stages)
        assert (c.gemv or fp.smem <= smem) and fp.blocks <= blocks
    dropped = set(full.points()) - set(small.points())
    assert any("shared memory" in " ".join(small.violations(c)) for c in dropped)
    assert any("blocks > the cap" in " ".join(small.violations(c)) for c in dropped)


def test_a_variable_that_splits_nothing_is_fixed_at_one(searched):
    w, cfg, result = searched("swiglu")
    space = Space(result, w.build(cfg))
    no_loop = [gs for gs in space.graphs if not gs.mapping.loop]
    assert no_loop
    for gs in no_loop:
        assert gs.variables[-1].values == (1,)
        assert all(c.loop == 1 for c in gs.points())
        assert gs.violations((1,) * gs.n_grid, 2) == ["loop splits no dim, so it must be 1 (got 2)"]


def test_sampling_is_deterministic_per_seed_and_draws_distinct_points(searched):
    w, _, result = searched("rmsnorm")
    space = Space(result, w.build(w.configs[1]))
    a, b = space.sample(50, seed=1), space.sample(50, seed=1)
    assert a == b
    assert space.sample(50, seed=2) != a
    assert len(set(a)) == 50 and set(a) <= set(space.points())
    assert sorted(space.sample(10**6, seed=0)) == sorted(space.points())   # k > size: everything


def test_sampling_is_uniform_over_graph_param_pairs(searched):
    """Each sGraph's share of a large sample follows its share of the points (not 1/number of graphs)."""
    w, _, result = searched("rmsnorm")
    space = Space(result, w.build(w.configs[1]))
    sizes = space.sizes()
    assert len({s for s in sizes if s}) > 1, "graphs of different sizes are needed to tell the two apart"
    n = len(space) // 2
    counts = [0] * len(sizes)
    for c in space.sample(n, seed=11):
        counts[c.graph] += 1
    for size, got in zip(sizes, counts):
        expected = n * size / len(space)
        assert abs(got - expected) <= 4 * math.sqrt(expected + 1) + 2


def test_candidates_round_trip_and_print():
    c = Candidate(3, (2, 64), 8)
    assert Candidate.from_json(c.to_json()) == c
    assert str(c) == "#3 grid(x=2, y=64) loop=8"
    t = Candidate(3, (2, 64), 8, warps=4, stages=2)
    assert Candidate.from_json(t.to_json()) == t and t.sizes == c
    assert str(t) == "#3 grid(x=2, y=64) loop=8 warps=4 stages=2"
    assert t.launch == Launch(4, 2) and c.launch == Launch()
    assert Candidate.from_json({"graph": 3, "grid": [2, 64], "loop": 8}) == c   # reports written before launches
    for one in (c, t, Candidate(0, (1,), 1, warps=16), Candidate(7, (2, 1, 64), 2, stages=3)):
        assert Candidate.parse(str(one)) == one                                   # a stored sample's label
    with pytest.raises(ValueError, match="not a candidate"):
        Candidate.parse("#3 grid(x=2) loop=8 warps=four")


@pytest.mark.parametrize("name", wl.names())
def test_sampled_points_compile_for_sm90_and_compute_the_verified_function(searched, name):
    """Warps, stages and tile shapes change how a kernel is compiled, never what it computes: sampled points
    (launches included) compile ahead of time for sm_90 with their launch, and the reference executor runs each
    one to the program's result at the small config (computing in float64, so that rounding cannot hide a
    difference)."""
    import torch

    from prism.interp import run
    from prism.tune.compile import compile_many
    from prism.tune.profile import random_inputs

    w, cfg, result = searched(name)
    program = w.build(cfg)
    space = Space(result, program)
    cands = space.sample(3, seed=13)
    graphs = [space.instantiate(c) for c in cands]
    xs = random_inputs(program, seed=2)
    want = run(program, xs, torch.float64)[0]
    for c, g, r in zip(cands, graphs, compile_many(graphs, workers=2)):
        assert r.ok, (str(c), r.error)
        assert c.warps in [k.num_warps for k in r.kernels], (str(c), r.kernels)
        got = run(g, xs, torch.float64)[0]
        assert torch.allclose(got, want, rtol=1e-7, atol=1e-9), str(c)     # the verifier's random test's bounds


def test_tilings_found_on_workers_are_those_found_here(searched, monkeypatch):
    """A space of many sGraphs finds their tilings on the tuning's workers (Space.tilings with a mapper), from
    each sGraph's JSON: the same tilings, sGraph by sGraph, as found in this process, size constraints included."""
    import prism.tune.space as space_module

    w, cfg, result = searched("attention")
    program = w.build(w.configs[0])
    assert any(g.constraints for g in result.graphs)
    here = [(gs.index, grid, loop) for gs, grid, loop in Space(result, program).tilings()]
    calls = []

    def mapper(fn, tasks):
        calls.append(len(tasks))
        return [fn(*t) for t in tasks]

    monkeypatch.setattr(space_module, "PARALLEL_GRAPHS", 1)
    found = Space(result, program)
    assert [(gs.index, grid, loop) for gs, grid, loop in found.tilings(mapper)] == here
    assert calls and calls[0] > 1 and len(found) == len(Space(result, program))
