"""sGraph extension: loop phases, dimension matching by union-find, concrete labels, instantiation."""

import pytest
import torch

from prism import interp
from prism.errors import MappingError
from prism.ir import KernelGraph
from prism.symbolic.dims import UNIT, AtomSpace
from prism.symbolic.mapping import Mapping, brute_force, enumerate_mappings
from prism.symbolic.draft import ACCUM_OP, RUNNING_MAX_OP, BOp, Draft
from prism.symbolic.structure import Structure, instantiate, structure_from_json

SPACE = AtomSpace(((4, 6), (6, 8)))  # X [n, d], W [d, e]


def extend(g, *ops):
    for op in ops:
        g = g.extend(op)
        assert not isinstance(g, str), op
    return g


def test_matmul_unions_the_contracted_dims_and_keeps_the_others():
    g = extend(Draft.start(SPACE), BOp("matmul", (0, 1)))
    assert g.dims[2] == (0, 3)
    assert g.uf.find(2) == 1  # W.0 joined X.1's class
    assert g.classes() == {0: (0,), 1: (1, 2), 3: (3,)}
    assert g.uses == (1, 1, 0)


def test_dims_of_different_extent_never_match():
    assert Draft.start(SPACE).extend(BOp("matmul", (1, 0))) == "dims"  # W [6,8] @ X [4,6]: 8 vs 4
    assert Draft.start(SPACE).extend(BOp("add", (0, 1))) == "dims"


def test_sum_makes_a_unit_dim_that_broadcasts():
    g = extend(Draft.start(SPACE), BOp("sum", (0,), (1,)), BOp("div", (0, 2)))
    assert g.dims[2] == (0, UNIT)
    assert g.dims[3] == (0, 1)


def test_loop_phases_never_mix_and_accum_takes_loop_tensors_only():
    """A post-loop value meets only loop values computed from loaders alone (loop-invariant under some
    mapping): not a running max, nor anything computed from one."""
    g = extend(Draft.start(SPACE), BOp(ACCUM_OP, (0,)))
    assert g.post == (False, False, True)
    assert g.extend(BOp(ACCUM_OP, (2,))) == "phase"
    g2 = extend(g, BOp("square", (2,)))
    assert g2.post[-1]
    walked = extend(g, BOp("exp", (1,)), BOp("exp", (0,)))
    assert walked.inv == (frozenset({0}), frozenset({1}), None, frozenset({1}), frozenset({0}))
    assert walked.extend(BOp("matmul", (2, 3))).post[-1]         # exp(W) is W's alone: it may be invariant
    assert walked.extend(BOp("add", (2, 4))) == "phase"          # X is summed by the loop: never invariant
    assert Draft.start(SPACE, pinning=False).extend(BOp(ACCUM_OP, (0,))).extend(BOp("matmul", (2, 1))) == "phase"
    running = extend(Draft.start(SPACE), BOp("max", (0,), (1,)), BOp(ACCUM_OP, (2,)), BOp(RUNNING_MAX_OP, (2,)))
    assert running.inv[-1] is None and running.extend(BOp("sub", (4, 3))) == "phase"


def test_a_loaders_tile_meets_post_loop_values_only_if_the_loop_leaves_it_alone():
    """acc(X) @ W pins W: every mapping then leaves W's dims to the grid (prism.symbolic.mapping)."""
    g = extend(Draft.start(SPACE), BOp(ACCUM_OP, (0,)), BOp("matmul", (2, 1)))
    assert g.post[-1] and g.invariant == frozenset({1})
    st = Structure(g, (3,))
    w_classes = {g.uf.find(a) for a in SPACE.input_dims(1)}
    maps = list(enumerate_mappings(st.problem()))
    assert maps and all(not set(m.loop) & w_classes for m in maps)
    assert set(maps) == brute_force(st.problem())


def test_accum_is_transparent_in_the_abstract_term():
    g = extend(Draft.start(SPACE), BOp("matmul", (0, 1)), BOp(ACCUM_OP, (2,)))
    assert g.terms[3] == g.terms[2] == ("matmul", (), ("in", (0,)), ("in", (1,)))


def test_concrete_labels_must_agree_when_dims_match():
    labels = ((-1, 0), (0, 1), (-1, 1), (0, 0))  # X.1 split by x and the loop; W.0 by the loop only
    g = Draft.start(SPACE, labels)
    assert g.extend(BOp("matmul", (0, 1))) == "dims"
    labels = ((-1, 0), (-1, 1), (-1, 1), (0, 0))
    assert not isinstance(Draft.start(SPACE, labels).extend(BOp("matmul", (0, 1))), str)


def fused_rmsnorm_like():
    """accum(X @ W) / accum(sum(X, 1)) -- a toy that exercises every op kind instantiation needs."""
    g = extend(Draft.start(SPACE), BOp("matmul", (0, 1)), BOp("sum", (0,), (1,)), BOp(ACCUM_OP, (2,)),
               BOp(ACCUM_OP, (3,)), BOp("div", (4, 5)))
    return Structure(g, (6,))


def test_instantiate_builds_the_concrete_graph_and_round_trips():
    st = fused_rmsnorm_like()
    m = Mapping(((3,),), (1,))  # x splits W's columns, the loop splits d
    g = instantiate(st, m, [(4, 12), (12, 8)], grid=(2,), loop=3, dtype="float32", names=["X", "W"])
    (custom,) = [n for _, n in g.topo() if n.op == "custom"]
    block = custom.attrs["block"]
    assert block.grid == (2,) and block.loop == 3
    x, w = torch.rand(4, 12, dtype=torch.float64), torch.rand(12, 8, dtype=torch.float64)
    (got,) = interp.run(g, [x, w], torch.float64)
    assert torch.allclose(got, (x @ w) / x.sum(1, keepdim=True))
    again = structure_from_json(st.to_json())
    assert again.key() == st.key()


def test_instantiate_refuses_shapes_that_break_the_structure():
    st = fused_rmsnorm_like()
    m = Mapping(((3,),), (1,))
    with pytest.raises(MappingError):
        instantiate(st, m, [(4, 12), (10, 8)])  # X.1 and W.0 are one class: 12 vs 10
    with pytest.raises(MappingError):
        instantiate(st, m, [(4, 12), (12, 8)], grid=(3,), loop=1)  # 8 columns into 3 blocks
    with pytest.raises(MappingError):
        instantiate(st, Mapping(((3,),), ()), loop=2)  # no loop: its range is 1
    assert isinstance(instantiate(st, m), KernelGraph)
