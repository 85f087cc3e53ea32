"""SearchResult: save/load, instantiation at other configs (search once, reuse), defaults, errors."""

import pytest
import torch

import prism
import prism.verify
import prism.workloads as wl
from prism import interp
from prism.errors import InputError, MappingError, SerializationError
from prism.provenance import build_id
from prism.search import SearchResult, default_verify, search
from prism.search.canonical import signature
from tests.configs import limits, small_cfg


@pytest.fixture(scope="module")
def rmsnorm_result():
    w = wl.get("rmsnorm")
    return search(w.build(small_cfg(w)), workers=1, **limits("rmsnorm", fused=True))


def test_the_default_verifier_is_the_e_graph_checker():
    assert default_verify() is prism.verify.equivalent


def test_save_and_load_round_trip(rmsnorm_result, tmp_path):
    r = rmsnorm_result
    path = tmp_path / "rmsnorm.json"
    r.save(path)
    again = SearchResult.load(path)
    assert len(again) == len(r) > 0
    assert [again.describe(i) for i in range(len(r))] == [r.describe(i) for i in range(len(r))]
    assert again.stats["verify"] == r.stats["verify"]
    for i in range(len(r)):
        assert signature(again.instantiate(i)) == signature(r.instantiate(i))
    with pytest.raises(SerializationError):
        SearchResult.from_json({"format": "something else"})


def test_a_result_knows_whether_this_build_searched_it(rmsnorm_result, tmp_path):
    """A saved result records the build that searched it; one from other code (or from before builds were
    recorded) is stale: it loads and works, and says it may lack graphs this build finds."""
    assert rmsnorm_result.build == build_id() and not rmsnorm_result.stale
    data = rmsnorm_result.to_json()
    assert not SearchResult.from_json(data).stale
    older = SearchResult.from_json(data | {"build": "0.0.1+000000000000"})
    assert older.stale and older.build == "0.0.1+000000000000" and len(older) == len(rmsnorm_result)
    unrecorded = {k: v for k, v in data.items() if k != "build"}
    assert SearchResult.from_json(unrecorded).stale
    path = tmp_path / "r.json"
    older.save(path)
    assert SearchResult.load(path).build == "0.0.1+000000000000"


def test_the_build_id_is_the_version_and_a_source_digest():
    version, digest = build_id().split("+")
    assert version == prism.__version__ and len(digest) == 12 and int(digest, 16) >= 0


def test_a_result_found_at_one_config_runs_at_another(rmsnorm_result):
    """The search runs once per workload; each graph is instantiated per config with real sizes.
    rms_norm's 1/N is symbolic, so it follows the new hidden size."""
    w = wl.get("rmsnorm")
    cfg = {"n": 6, "d": 96}
    program = w.build(cfg)
    inputs = [t.to(torch.float64) for t in w.inputs(cfg, seed=3, dtype="float32")]
    (want,) = interp.run(program, inputs, torch.float64)
    checked = 0
    for i, g in enumerate(rmsnorm_result.graphs):
        grid = [2 if k == 0 else 3 for k in range(g.n_grid)]
        try:
            concrete = rmsnorm_result.instantiate(i, program, grid=grid, loop=4 if g.mapping.loop else 1)
        except MappingError:
            continue  # these sizes do not divide this graph's tiles
        (got,) = interp.run(concrete, inputs, torch.float64)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), rmsnorm_result.describe(i)
        checked += 1
    assert checked >= len(rmsnorm_result.graphs) // 2


def test_instantiate_refuses_sizes_that_do_not_divide(rmsnorm_result):
    w = wl.get("rmsnorm")
    i = next(i for i, g in enumerate(rmsnorm_result.graphs) if g.mapping.loop)
    with pytest.raises(MappingError):
        rmsnorm_result.instantiate(i, w.build({"n": 4, "d": 64}), loop=7)


def test_programs_with_several_outputs_are_searched_jointly():
    """Two outputs of one input: joint forms, each one kernel writing both (prism.search.joint); the concrete
    ablation modes take one output only."""
    g = prism.KernelGraph()
    x = g.input((4, 8), name="X")
    g.output(g.exp(x), g.square(x))
    result = search(g, workers=1)
    assert result.graphs and len(result.stats["parts"]) == 2
    for i in range(len(result.graphs)):
        inst = result.instantiate(i)
        assert len(inst.outputs) == 2 and sum(n.op == "custom" for n in inst.nodes) == 1
    with pytest.raises(InputError, match="symbolic maps only"):
        search(g, workers=1, modes="mirage")


def test_stats_report_every_phase(rmsnorm_result):
    s = rmsnorm_result.stats
    assert s["generate"]["structures"] > 0 and s["generate"]["seconds"] >= 0
    assert s["instantiate"]["mappings"] >= s["instantiate"]["candidates"] > 0
    assert s["verify"]["checked"] == s["verify"]["verified"] + s["verify"]["rejected"]
    assert s["verify"]["verified"] == len(rmsnorm_result) == s["cross_check"]["checked"]
    assert s["cross_check"]["unsound"] == 0 and s["cross_check"]["events"] == []
    assert s["limits"]["max_block_ops"] == 11 and not s["timed_out"]


def test_a_time_limit_stops_the_search_cleanly():
    w = wl.get("attention")
    r = search(w.build(small_cfg(w)), workers=1, time_limit=1e-9)  # past before the first step
    assert r.stats["timed_out"] and len(r) == 0
