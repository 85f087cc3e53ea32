"""The numeric cross-check: it passes correct mappings, catches wrong ones, and records unsound events."""

import prism.workloads as wl
from prism.search import search
from prism.search.check import check_shapes_for, cross_check
from prism.verify import Verdict
from prism.symbolic.mapping import Mapping
from tests.configs import small_cfg


def accept_everything(reference, candidate, **kwargs):
    """A deliberately unsound verifier: every candidate 'proven' equal."""
    return Verdict(True, "accepted without proof")


def test_an_unsound_verifier_is_caught_by_the_cross_check_and_recorded():
    w = wl.get("rmsnorm")
    program = w.build(small_cfg(w))
    r = search(program, verify=accept_everything, workers=1, max_block_ops=11, max_grid=1, prefilter=False)
    cc = r.stats["cross_check"]
    assert cc["unsound"] > 0 and len(cc["events"]) == cc["unsound"]
    event = cc["events"][0]
    assert event["reference"].startswith("matmul(") and "rms_norm" in event["program"]
    assert any(p in event["candidate"] for p in ("part(", "repl(", "red(", "comb("))
    assert event["graph"].startswith("sGraph") and event["max_error"] > 1e-9
    assert event["verifier"] == "accepted without proof"
    assert len(r) == r.stats["verify"]["verified"] - cc["unsound"]  # unsound graphs are never returned
    honest = search(program, workers=1, max_block_ops=11, max_grid=1)
    # everything the e-graph proves survives the permissive run; the permissive run may return more
    # (graphs that are right for all sizes but that the axioms cannot prove, e.g. (d·a)/(d·b) = a/b)
    assert {honest.describe(i) for i in range(len(honest))} <= {r.describe(i) for i in range(len(r))}


def test_cross_check_sizes_divide_and_keep_the_programs_equalities():
    w = wl.get("rmsnorm")
    program = w.build(small_cfg(w))
    r = search(program, workers=1, max_block_ops=11, max_grid=1)
    fused = next(g for g in r.graphs if g.mapping.loop and g.mapping.grid and not g.structure.kernel_ops)
    st, m = fused.structure, fused.mapping
    shapes = check_shapes_for(program, st, m, (3,), 2, 2)
    (x, wt) = shapes
    assert x[1] == wt[0]  # the program's own equality (X's columns are W's rows)
    assert cross_check(program, st, m).ok
    # the same structure with the grid splitting d: the norm is then computed per block, wrongly
    wrong = Mapping(((st.graph.uf.find(1),),), m.loop)
    bad = cross_check(program, st, wrong)
    assert not bad.ok and bad.max_error > 1e-3


def test_the_prefilter_only_saves_verifier_calls():
    w = wl.get("attention")
    program = w.build(small_cfg(w))
    fast = search(program, workers=1, max_block_ops=9, max_grid=2)
    full = search(program, workers=1, max_block_ops=9, max_grid=2, prefilter=False)
    assert len(fast) > 0
    assert [fast.describe(i) for i in range(len(fast))] == [full.describe(i) for i in range(len(full))]
    assert fast.stats["prefilter"]["rejected"] > 0 and full.stats["prefilter"]["rejected"] == 0
    assert fast.stats["verify"]["checked"] < full.stats["verify"]["checked"]
    assert full.stats["cross_check"]["unsound"] == 0
