"""Parameter spaces: every point instantiates, every constraint holds, sampling is uniform and seeded."""

from __future__ import annotations

import itertools
import math

import pytest

import prism.workloads as wl
from prism.codegen.layout import Layout
from prism.errors import MappingError
from prism.tune.space import MAX_NUMEL, Candidate, Space
from prism.tune.target import H100


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _spaces(searched, name):
    """The space of the small search result at its own small config and at a real config (a saved
    search re-instantiated at other sizes; d=1024, since the test-limited searches keep only graphs
    whose whole-column tiles of a 4096-wide weight exceed shared memory)."""
    w, cfg, result = searched(name)
    real = {"n": 8, "d": 1024} if w.dims == ("n", "d") else w.configs[0]
    return [Space(result, w.build(cfg)), Space(result, w.build(real))]


@pytest.mark.parametrize("name", wl.names())
def test_every_sampled_point_instantiates_and_respects_every_constraint(searched, name):
    for space in _spaces(searched, name):
        assert len(space) > 0
        for c in space.sample(40, seed=7):
            assert space.violations(c) == []
            kg = space.instantiate(c)                      # never MappingError
            block = kg.blocks[0]                           # a partials form's second kernel sums its groups
            assert block.grid == c.grid and block.loop == c.loop
            assert math.prod(block.grid) <= H100.max_blocks
            assert all(g <= H100.max_grid_yz for g in block.grid[1:])
            for i in block.loaders:
                node = block.nodes[i]
                full = block.input_types[node.attrs["index"]].shape
                for tile, size in zip(node.outputs[0].shape, full):
                    assert size % tile == 0
                    assert tile == size or _pow2(tile), (c, node.outputs[0].shape, full)
            gs = space.graphs[c.graph]
            fp = gs.footprint(c.grid, c.loop)
            assert fp.smem <= H100.smem_per_block and fp.max_numel <= MAX_NUMEL


@pytest.mark.parametrize("name", wl.names())
def test_padded_tiles_agree_with_code_generation(searched, name):
    """The space's analytic padding (power of two; 16 on tl.dot dims) is what codegen's Layout does."""
    space = _spaces(searched, name)[1]
    for c in space.sample(25, seed=3):
        block = space.instantiate(c).blocks[0]
        layout = Layout(block, [f"in{k}" for k in range(len(block.input_types))])
        gs = space.graphs[c.graph]
        for k in range(len(gs.ops)):
            assert layout.shape(k) == gs.padded(k, c.grid, c.loop), (c, k)


def test_points_are_exactly_the_valid_part_of_the_product(searched):
    """Nothing valid is left out, nothing invalid let in; and the IR agrees about divisibility."""
    w, cfg, result = searched("attention")
    space = Space(result, w.build(cfg))
    for gs in space.graphs:
        pts = set(gs.points())
        for values in itertools.product(*(v.values + (v.values[-1] * 2,) for v in gs.variables)):
            grid, loop = tuple(values[:-1]), values[-1]
            why = gs.violations(grid, loop)
            assert ((grid, loop) in pts) == (not why)
            if any("does not split" in r for r in why):
                with pytest.raises(MappingError):
                    result.instantiate(gs.index, w.build(cfg), grid=grid, loop=loop)


def test_shared_memory_and_block_caps_bound_the_space(searched):
    w, _, result = searched("rmsnorm")
    program = w.build(w.configs[1])
    full = Space(result, program)
    prints = [full.graphs[c.graph].footprint(c.grid, c.loop) for c in full.points()]
    smem = sorted(f.smem for f in prints)[len(prints) // 2]          # caps at the medians
    blocks = sorted(f.blocks for f in prints)[len(prints) // 2]
    small = Space(result, program, target=H100.with_(smem_per_block=smem, max_blocks=blocks))
    assert 0 < len(small) < len(full)
    for c in small.points():
        fp = small.graphs[c.graph].footprint(c.grid, c.loop)
        assert fp.smem <= smem and fp.blocks <= blocks
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
        assert all(loop == 1 for _, loop in gs.points())
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
