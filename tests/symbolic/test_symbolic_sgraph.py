"""sGraph extension: loop phases, dimension matching by union-find, concrete labels, instantiation."""

import pytest
import torch

from prism import interp
from prism.errors import MappingError
from prism.ir import KernelGraph
from prism.symbolic.dims import UNIT, AtomSpace
from prism.symbolic.mapping import Mapping
from prism.symbolic.sgraph import ACCUM, BOp, SGraph
from prism.symbolic.structure import Structure, instantiate, structure_from_json

SPACE = AtomSpace(((4, 6), (6, 8)))  # X [n, d], W [d, e]


def extend(g, *ops):
    for op in ops:
        g = g.extend(op)
        assert not isinstance(g, str), op
    return g


def test_matmul_unions_the_contracted_dims_and_keeps_the_others():
    g = extend(SGraph.start(SPACE), BOp("matmul", (0, 1)))
    assert g.dims[2] == (0, 3)
    assert g.uf.find(2) == 1  # W.0 joined X.1's class
    assert g.classes() == {0: (0,), 1: (1, 2), 3: (3,)}
    assert g.uses == (1, 1, 0)


def test_dims_of_different_extent_never_match():
    assert SGraph.start(SPACE).extend(BOp("matmul", (1, 0))) == "dims"  # W [6,8] @ X [4,6]: 8 vs 4
    assert SGraph.start(SPACE).extend(BOp("add", (0, 1))) == "dims"


def test_sum_makes_a_unit_dim_that_broadcasts():
    g = extend(SGraph.start(SPACE), BOp("sum", (0,), (1,)), BOp("div", (0, 2)))
    assert g.dims[2] == (0, UNIT)
    assert g.dims[3] == (0, 1)


def test_loop_phases_never_mix_and_accum_takes_loop_tensors_only():
    g = extend(SGraph.start(SPACE), BOp(ACCUM, (0,)))
    assert g.post == (False, False, True)
    assert g.extend(BOp("matmul", (2, 1))) == "phase"
    assert g.extend(BOp(ACCUM, (2,))) == "phase"
    g2 = extend(g, BOp("square", (2,)))
    assert g2.post[-1]


def test_accum_is_transparent_in_the_abstract_term():
    g = extend(SGraph.start(SPACE), BOp("matmul", (0, 1)), BOp(ACCUM, (2,)))
    assert g.terms[3] == g.terms[2] == ("matmul", (), ("in", (0,)), ("in", (1,)))


def test_concrete_labels_must_agree_when_dims_match():
    labels = ((-1, 0), (0, 1), (-1, 1), (0, 0))  # X.1 split by x and the loop; W.0 by the loop only
    g = SGraph.start(SPACE, labels)
    assert g.extend(BOp("matmul", (0, 1))) == "dims"
    labels = ((-1, 0), (-1, 1), (-1, 1), (0, 0))
    assert not isinstance(SGraph.start(SPACE, labels).extend(BOp("matmul", (0, 1))), str)


def fused_rmsnorm_like():
    """accum(X @ W) / accum(sum(X, 1)) -- a toy that exercises every op kind instantiation needs."""
    g = extend(SGraph.start(SPACE), BOp("matmul", (0, 1)), BOp("sum", (0,), (1,)), BOp(ACCUM, (2,)),
               BOp(ACCUM, (3,)), BOp("div", (4, 5)))
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
