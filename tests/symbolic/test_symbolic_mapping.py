"""Mapping instantiation in class terms equals brute force over the raw m[T,d,p], modulo symmetry."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from prism.symbolic.dims import UNIT, AtomSpace, MVar, UnionFind
from prism.symbolic.mapping import Mapping, MappingProblem, brute_force, enumerate_mappings


def rmsnorm_problem():
    """X [n, d] @ W [d, e] -> [n, e]: classes n = {X.0}, d = {X.1, W.0}, e = {W.1}."""
    space = AtomSpace(((4, 6), (6, 8)))
    uf = UnionFind.identity(4).union(1, 2)
    return MappingProblem((space.input_dims(0), space.input_dims(1)), ((0, 3),), uf)


def attention_problem():
    """Q [b,g,k], Kt [b,k,h], V [b,h,v]; outputs numerator [b,g,v] and denominator [b,g,1]."""
    space = AtomSpace(((2, 4, 16), (2, 16, 32), (2, 32, 12)))
    uf = UnionFind.identity(9)
    for a, b in [(0, 3), (0, 6), (2, 4), (5, 7)]:
        uf = uf.union(a, b)
    return MappingProblem(tuple(space.input_dims(i) for i in range(3)), ((0, 1, 8), (0, 1, UNIT)), uf)


def test_rmsnorm_mappings_match_brute_force_and_count():
    p = rmsnorm_problem()
    found = list(enumerate_mappings(p))
    assert len(found) == len(set(found)) == 16  # 8 grid choices (subsets of 3 singletons) x loop {}, {d}
    assert set(found) == brute_force(p)


def test_attention_mappings_match_brute_force_with_three_grid_dims():
    p = attention_problem()
    found = list(enumerate_mappings(p, max_grid=3))
    assert len(found) == len(set(found))
    assert set(found) == brute_force(p, max_grid=3)
    # the hand-written split-KV kernel: x over batch, y over kv length, loop over kv length
    assert Mapping(((0,), (5,)), (5,)) in found


def test_a_class_holding_two_dims_of_one_tensor_is_never_partitioned():
    space = AtomSpace(((6, 6),))
    p = MappingProblem((space.input_dims(0),), ((0, 1),), UnionFind.identity(2).union(0, 1))
    assert set(enumerate_mappings(p)) == brute_force(p) == {Mapping((), ())}


def test_unit_dims_are_never_partitioned():
    space = AtomSpace(((1, 6), (6, 5)))  # X has a size-1 dim
    p = MappingProblem((space.input_dims(0), space.input_dims(1)), ((UNIT, 3),), UnionFind.identity(4).union(1, 2))
    found = set(enumerate_mappings(p))
    assert found == brute_force(p)
    for m in found:
        loaders, _ = p.maps(m)
        assert all(d != 0 for d in loaders[0][0].values()) and loaders[0][1] != 0


def test_maps_of_the_fused_rmsnorm_kernel():
    p = rmsnorm_problem()
    loaders, omaps = p.maps(Mapping(((3,),), (1,)))  # x splits e (W's columns), the loop splits d
    assert loaders == [({}, 1), ({"x": 1}, 0)]
    assert omaps == [{"x": 1}]
    # split-K: x splits d, so the output's blocks along x are summed (omap leaves x out)
    loaders, omaps = p.maps(Mapping(((1,),), ()))
    assert loaders == [({"x": 1}, None), ({"x": 0}, None)] and omaps == [{}]


def test_raw_view_round_trips_and_names_the_papers_variables():
    p = rmsnorm_problem()
    for m in enumerate_mappings(p):
        assert p.canonical(p.raw(m)) == m
    m = Mapping(((0,),), (1,))  # Figure 1(b): imap {r <-> x}, fmap {c <-> i} for X, W replicated
    v = p.m_values(m, ["X", "W"])
    assert v[MVar("X", 0, "x")] == 1 and v[MVar("X", 1, "x")] == 0
    assert v[MVar("X", 1, "i")] == 1 and v[MVar("W", 0, "i")] == 1
    assert v[MVar("W", 0, "x")] == v[MVar("W", 1, "x")] == 0
    assert v[MVar("out0", 0, "x")] == 1


@st.composite
def problems(draw):
    """Up to three loaders of rank <= 2, random dim equalities, outputs made of their classes or units."""
    ranks = draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))
    shapes = tuple(tuple(draw(st.sampled_from([1, 4, 6])) for _ in range(r)) for r in ranks)
    space = AtomSpace(shapes)
    n = len(space)
    uf = UnionFind.identity(n)
    for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3)):
        if space.extent(a) == space.extent(b) != 1:
            uf = uf.union(a, b)
    live = [a for i in range(len(shapes)) for a in space.input_dims(i) if a != UNIT]
    outputs = tuple(tuple(draw(st.sampled_from(live + [UNIT]) if live else st.just(UNIT)) for _ in range(r))
                    for r in draw(st.lists(st.integers(1, 2), min_size=1, max_size=2)))
    return MappingProblem(tuple(space.input_dims(i) for i in range(len(shapes))), outputs, uf)


@settings(max_examples=60, deadline=None)
@given(problems(), st.integers(1, 2))
def test_class_enumeration_equals_brute_force_on_random_problems(p, max_grid):
    found = list(enumerate_mappings(p, max_grid))
    assert len(found) == len(set(found))
    assert set(found) == brute_force(p, max_grid)


def test_every_enumerated_mapping_satisfies_eq_1_and_eq_2():
    p = attention_problem()
    for m in enumerate_mappings(p):
        raw = p.raw(m)
        for rows in itertools.chain(raw.imaps, raw.omaps):  # eq. 2: a dim is split by <= 1 grid dim
            used = [d for d in rows if d is not None]
            assert len(used) == len(set(used))
        for f, dims in zip(raw.fmaps, p.loaders):  # eq. 1 for the loop: one dim at most, never a unit
            assert f is None or dims[f] != UNIT
