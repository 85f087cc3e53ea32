"""Symbolic tile dims D/σ(T,d), coefficient matching, atoms, and the immutable union-find."""

from prism.symbolic.dims import UNIT, AtomSpace, InvExtent, MVar, TileDim, UnionFind, match_dims


def test_atoms_number_input_dims_and_size_one_dims_are_unit():
    space = AtomSpace(((4, 6), (6, 1, 8)))
    assert space.atoms == ((0, 0), (0, 1), (1, 0), (1, 1), (1, 2))
    assert space.input_dims(0) == (0, 1)
    assert space.input_dims(1) == (2, UNIT, 4)
    assert [space.extent(a) for a in (0, 1, 2, 4, UNIT)] == [4, 6, 6, 8, 1]
    assert space.owner(4) == (1, 2)


def test_union_find_is_immutable_and_keeps_the_smallest_representative():
    uf = UnionFind.identity(5)
    uf2 = uf.union(3, 1).union(4, 3)
    assert uf.find(4) == 4  # the original is untouched
    assert uf2.find(4) == 1 and uf2.find(3) == 1 and uf2.find(0) == 0
    assert uf2.union(1, 4) is uf2
    assert uf2.classes() == {0: (0,), 1: (1, 3, 4), 2: (2,)}
    assert uf2.classes([0, 3]) == {0: (0,), 1: (3,)}
    assert uf2.find(UNIT) == UNIT


def test_coefficient_matching_equates_the_mapping_variables_of_each_parallel_dim():
    # the paper's Matmul example: 4096/σ(X,c) = 4096/σ(W,r) iff m[X,c,p] = m[W,r,p] for p in {x, i}
    xc, wr = TileDim(4096, "X", 1, ("x", "i")), TileDim(4096, "W", 0, ("x", "i"))
    assert match_dims(xc, wr) == [(MVar("X", 1, "x"), MVar("W", 0, "x")), (MVar("X", 1, "i"), MVar("W", 0, "i"))]
    assert match_dims(xc, TileDim(128, "W", 1, ("x", "i"))) is None  # different D: no m makes them equal


def test_tile_dim_evaluates_to_d_over_the_sizes_of_its_partitioning_dims():
    xc = TileDim(4096, "X", 1, ("x", "i"))
    m = {MVar("X", 1, "x"): 0, MVar("X", 1, "i"): 1}
    assert xc.evaluate(m, {"x": 64, "i": 16}) == 256
    assert xc.evaluate({}, {"x": 64, "i": 16}) == 4096
    # the equalities from matching make two dims identical at every size
    wr = TileDim(4096, "W", 0, ("x", "i"))
    eq = match_dims(xc, wr)
    for mx in (0, 1):
        for mi in (0, 1):
            assign = {}
            for (a, b), v in zip(eq, (mx, mi)):
                assign[a] = assign[b] = v
            for sizes in ({"x": 2, "i": 8}, {"x": 64, "i": 1}):
                assert xc.evaluate(assign, sizes) == wr.evaluate(assign, sizes)


def test_inv_extent_is_symbolic_until_given_shapes():
    c = InvExtent(0, 1)
    assert repr(c) == "1/|in0.1|"
    assert c.value([(8, 4096), (4096, 4096)]) == 1 / 4096
    assert c.value([(8, 1024), (1024, 1024)]) == 1 / 1024
