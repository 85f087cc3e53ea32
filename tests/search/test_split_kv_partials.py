"""Issue 18's search side: beside each verified mapping whose outputs a grid dim sums (atomic adds across
blocks), the search returns its partials variant (the blocks' tiles kept side by side, then group_sum), verified
on its own; among them the Mirage-style split-KV attention. Their kernels: tests/codegen/cases.py
("searched_split_kv_partials")."""

import pytest

import prism.workloads as wl
from prism import verify
from prism.ir.block import GRID_DIMS
from prism.search import search
from prism.search.result import SymbolicGraph
from prism.search.canonical import signature
from prism.symbolic.mapping import Mapping
from tests.configs import SMALL_ATT, limits

_FOUND: dict = {}


def found(name: str):
    """(program, SearchResult) with room for the paper's split-KV kernel, searched once."""
    if name not in _FOUND:
        program = wl.get(name).build(SMALL_ATT)
        _FOUND[name] = program, search(program, workers=1, **limits(name, fused=True))
    return _FOUND[name]


def _partials(result) -> list[int]:
    """The partials forms proved for all sizes (those proved under size constraints, the walk and group forms,
    are tests/search/test_constrained_forms.py's)."""
    return [i for i, g in enumerate(result.graphs) if g.mapping.partials and not g.mapping.constrained]


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_split_kv_form_with_partials_is_found(name):
    program, result = found(name)
    want = signature(wl.get(name).fused(SMALL_ATT, partials=True))
    got = [signature(result.instantiate(i)) for i in _partials(result)]
    assert want in got, "\n".join([want, "--- partials forms found:", *got])
    assert result.stats["cross_check"]["unsound"] == 0


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_partials_forms_add_no_blocks_and_compute_the_program(name):
    """At grid sizes of 2, no saver of a partials form sums a grid dim's blocks (no atomics: each grid dim places
    its tiles, or the output is written once along it); group sums fold the partials back, and the graph is the
    program, proved and run."""
    program, result = found(name)
    forms = _partials(result)
    assert forms
    for i in forms:
        sg = result.graphs[i]
        g = result.instantiate(i, grid=(2,) * sg.n_grid, loop=2 if sg.mapping.loop else 1)
        first, second = g.blocks
        for k in range(len(first.savers)):
            assert not first.summed(k), sg.describe()
        assert any(n.op == "group_sum" for _, n in second.topo()), sg.describe()
        assert verify.random_test(program, g).equal, sg.describe()
    assert verify.equivalent(program, result.instantiate(forms[0])).equal


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_each_partials_form_stands_beside_its_atomic_twin(name):
    """The tuner gets both forms of every mapping that sums blocks, and no partials form of one that does not."""
    _, result = found(name)
    mappings = {(id_(g), g.mapping) for g in result.graphs}
    for g in (result.graphs[i] for i in _partials(result)):
        assert (id_(g), Mapping(g.mapping.grid, g.mapping.loop)) in mappings
        folds = g.structure.problem().partials(g.mapping)
        assert any(folds) and all(p in GRID_DIMS for fold in folds for p in fold)


def id_(g: SymbolicGraph) -> tuple:
    return g.structure.key()


def test_the_cost_model_prices_both_forms():
    """The tuner ranks partials and split-sum forms with one cost model: the split form's kernel 1 sums its blocks
    in its launch (prism.codegen.split), the partials form's does not; both are estimated."""
    from prism.tune.cost import estimate, kernels_of

    w = wl.get("attention")
    cfg = w.configs[0]
    summed, partials = (kernels_of(w.fused(cfg, partials=p)) for p in (False, True))
    assert summed[0].atomic and not any(k.memset for k in summed)
    assert not any(k.atomic or k.memset for k in partials)
    assert all(estimate(w.fused(cfg, partials=p)).seconds > 0 for p in (False, True))
