"""Issue 14's search side: the search finds verified running-max (online softmax) forms of attention,
QK-attention and a softmax-then-matmul program written the paper's way (exp/sum/div, no max); only those
are marked safe (prism.tune.safety), and the tuner chooses a safe one over a faster unsafe one. Their
kernels at the logits of real models: tests/codegen/cases.py ("large_logits_*")."""

import pytest

import prism.workloads as wl
from prism import verify
from prism.ir import KernelGraph
from prism.search import search
from prism.search.canonical import signature
from prism.tune.safety import overflow_risk
from tests.codegen.cases import softmax_matmul_program
from tests.configs import SMALL_ATT

ONLINE_OPS = {"attention": 13, "qk_attention": 14}
"""Block ops of the online form: three loaders, then (rms_norm), matmul, max, running max, sub, exp, matmul,
an online sum, sum, an online sum and the div."""


_FOUND: dict = {}


def found(name: str):
    """(program, SearchResult) with room for one fused kernel with a running max, searched once."""
    if name not in _FOUND:
        if name == "softmax_matmul":
            program, limits = softmax_matmul_program(), {"max_block_ops": 11, "max_grid": 1}
        else:
            program, limits = wl.get(name).build(SMALL_ATT), {"max_block_ops": ONLINE_OPS[name], "max_grid": 1}
        _FOUND[name] = program, search(program, workers=1, **limits)
    return _FOUND[name]


def _safe(result) -> list[KernelGraph]:
    return [g for g in map(result.instantiate, range(len(result))) if overflow_risk(g) is None]


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_online_form_is_found_verified_and_safe(name):
    program, result = found(name)
    w = wl.get(name)
    want = signature(w.fused(SMALL_ATT, online=True))
    safe = [signature(g) for g in _safe(result)]
    assert want in safe, "\n".join([want, "--- safe forms found:", *safe])
    assert result.stats["cross_check"]["unsound"] == 0
    unsafe = [g for g in map(result.instantiate, range(len(result))) if overflow_risk(g)]
    assert unsafe, "the paper's exp/sum/div fused forms are found too, and marked"
    assert overflow_risk(w.fused(SMALL_ATT)) and overflow_risk(w.fused(SMALL_ATT, online=True)) is None


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_safe_split_kv_form_is_found_verified_and_safe(name):
    """With a grid dim for the kv splits, the search finds the online form's partials variant: each split's
    online sums and its max side by side, rescaled to the largest max by kernel 2 (FlashDecoding's combine),
    the hand-written form among them; the same structure with the splits' sums added across blocks (each
    scaled by its own max) is wrong, and not returned."""
    w = wl.get(name)
    program = w.build(SMALL_ATT)
    result = search(program, workers=1, max_block_ops=ONLINE_OPS[name] - 1, max_grid=2)
    assert result.stats["cross_check"]["unsound"] == 0
    split = [i for i, g in enumerate(result.graphs) if g.mapping.partials
             and any(o.op == "running_max" for o in g.structure.graph.ops)]
    want = signature(w.fused(SMALL_ATT, online=True, splits=2, loop=2, partials=True))
    assert want in [signature(result.instantiate(i)) for i in split]
    for i in split:
        g = result.instantiate(i, grid=(2,) * result.graphs[i].n_grid, loop=2)
        assert overflow_risk(g) is None
        assert any(n.op == "group_max" for _, n in g.blocks[1].topo())
        assert verify.random_test(program, g).equal
    summed = [g for g in result.graphs if not g.mapping.partials and g.mapping.grid
              and any(o.op == "running_max" for o in g.structure.graph.ops)
              and any(len(cls) and c in g.mapping.loop for cls in g.mapping.grid for c in cls)]
    assert not summed, "an online form whose splits' sums are added across blocks was returned"


def test_the_tuner_chooses_the_safe_split_kv_form_at_decode_shapes(tmp_path):
    """At a real decode config (2 batches, a kv length of 8192) one block per batch leaves the GPU idle: given
    the search's safe forms, the cost model ranks the split form with rescaled partials first."""
    from prism.runtime import superoptimize

    w = wl.get("attention")
    program = w.build(w.configs[0])
    result = search(program, workers=1, max_block_ops=ONLINE_OPS["attention"] - 1, max_grid=2)
    with pytest.warns(RuntimeWarning, match="no GPU|reference executor"):
        opt = superoptimize(program, search_result=result, budget=8, compile=False, cache=tmp_path, device="cpu")
    assert overflow_risk(opt.graph) is None
    first, second = opt.graph.blocks
    assert len(first.grid) == 2 and any(n.op == "running_max" for _, n in first.topo())
    assert any(n.op == "group_max" for _, n in second.topo())


def test_a_program_in_the_papers_form_gets_safe_fused_forms():
    """The program has no max; its safe forms come from the closure's shift rule and are proved equal."""
    program, result = found("softmax_matmul")
    assert overflow_risk(program) is not None
    safe = _safe(result)
    running = [g for g in safe if any(n.op == "running_max" for b in g.blocks for _, n in b.topo())]
    assert running, "no running-max form found"
    for g in safe:  # the rest subtract the max of a whole row, loaded at once
        assert verify.equivalent(program, g).equal
        assert verify.random_test(program, g).equal


def test_the_tuner_chooses_a_safe_form_and_says_why(tmp_path):
    """Given both the paper's fused forms and the online ones, the tuner sets the unsafe ones aside (even
    the ones its cost model ranks faster) and its report marks them."""
    from prism.runtime import superoptimize

    program, result = found("attention")
    with pytest.warns(RuntimeWarning, match="no GPU|reference executor"):
        opt = superoptimize(program, search_result=result, budget=8, compile=False, cache=tmp_path, device="cpu")
    report = opt.report
    assert overflow_risk(opt.graph) is None and opt.graph.blocks
    risky = [e for e in report.entries if e.risk]
    assert risky and all("exp" in e.risk for e in risky)
    assert any("set aside" in note for note in report.notes)
    chosen = report.entries[report.chosen]
    assert chosen.risk is None and "safe" in str(report)
