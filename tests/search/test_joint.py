"""Joint forms (prism.search.joint): one kernel writing several outputs of a program, each output proven on its
own, run by the reference executor against torch; groups of outputs; superoptimize taking the joint kernel."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from prism import KernelGraph, interp
from prism.errors import InputError
from prism.runtime import superoptimize
from prism.search import SearchResult, join, search
from prism.search.joint import groups, joint_forms
from prism.symbolic.dims import AtomSpace
from prism.verify import equivalent

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")
QUICK = {"workers": 1, "max_block_ops": 10, "max_grid": 2}
N, D, KV = 4, 32, 16


def norm_qkv(residual: bool = False, dtype: str = "float32") -> KernelGraph:
    """Q, K and V of one normalized input (K and V narrower, as in grouped-query attention); with `residual`,
    the input is a residual sum kept as an output of its own first."""
    g = KernelGraph()
    x = g.input((N, D), dtype, "X")
    r = g.input((N, D), dtype, "R") if residual else None
    wq, wk, wv = g.input((D, D), dtype, "Wq"), g.input((D, KV), dtype, "Wk"), g.input((D, KV), dtype, "Wv")
    h = g.add(x, r) if residual else x
    n = g.rms_norm(h, 1e-6)
    outs = [g.matmul(n, w) for w in (wq, wk, wv)]
    g.output(*([h] if residual else []), *outs)
    return g


def torch_norm_qkv(x, wq, wk, wv):
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return [n @ wq, n @ wk, n @ wv]


def draw(g: KernelGraph, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(t.shape, generator=gen, dtype=torch.float64) - 0.5 for t in g.inputs]


@pytest.fixture(scope="module")
def qkv():
    g = norm_qkv()
    return g, search(g, **QUICK)


def test_a_joint_form_is_one_kernel_writing_every_output(qkv):
    g, result = qkv
    assert result.graphs and result.stats["joint"]["forms"] >= len(result.graphs)
    assert [p["verify"]["verified"] > 0 for p in result.stats["parts"]] == [True] * 3
    for i in range(len(result.graphs)):
        inst = result.instantiate(i)
        (kernel,) = [n for n in inst.nodes if n.op == "custom"]   # one kernel (kernel-level divisions after it)
        assert len(inst.outputs) == 3 and len(kernel.outputs) >= 3
    # the shared work is done once: a form whose parts each accumulate the sum of squares accumulates it once
    looped = [sg for sg in result.graphs if sg.mapping.loop and any(o.op == "square" for o in sg.structure.graph.ops)]
    assert looped and all(sum(o.op == "square" for o in sg.structure.graph.ops) == 1 for sg in looped)


def test_every_output_of_a_joint_form_is_proven_and_matches_torch(qkv):
    g, result = qkv
    xs = draw(g)
    want = torch_norm_qkv(*xs)
    for i in range(0, len(result.graphs), max(1, len(result.graphs) // 6)):
        sg = result.graphs[i]
        assert equivalent(g, result.instantiate(i)).equal
        grid = tuple(2 for _ in range(sg.n_grid))
        got = interp.run(result.instantiate(i, grid=grid, loop=2 if sg.mapping.loop else 1), xs, torch.float64)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_a_joint_form_with_outputs_swapped_is_refused_on_that_output(qkv):
    g, result = qkv
    st = result.graphs[0].structure
    k, v = st.results[1], st.results[2]
    swapped = dataclasses.replace(st, results=(st.results[0], v, k))
    verdict = equivalent(g, dataclasses.replace(result.graphs[0], structure=swapped).instantiate(dtype="float32"))
    assert not verdict.equal and verdict.reason.startswith("output 1:")


def test_parts_that_split_a_shared_input_differently_do_not_join(qkv):
    g, _ = qkv
    (q, used_q), (k, used_k) = g.output_cone(0), g.output_cone(1)
    rows_split = [sg for sg in search(q, **QUICK).graphs if sg.maps()["loaders"][0][0]]  # X's rows split by the grid
    whole = [sg for sg in search(k, **QUICK).graphs if not sg.maps()["loaders"][0][0]]  # X whole in every block
    assert rows_split and whole
    sub, used = g.outputs_cone([0, 1])
    space = AtomSpace(tuple(t.shape for t in sub.inputs))
    lift_q, lift_k = [used.index(j) for j in used_q], [used.index(j) for j in used_k]
    assert joint_forms(space, [([rows_split[0]], lift_q), ([whole[0]], lift_k)]) == []
    assert joint_forms(space, [([rows_split[0]], lift_q), (rows_split[:1], lift_k)])  # the same form joins


def test_outputs_group_by_the_forms_their_parts_share():
    g = norm_qkv(residual=True)
    parts = [search(g.output_cone(k)[0], **QUICK).graphs for k in range(4)]
    assert groups(g, parts) == [(0,), (1, 2, 3)]


def test_a_joint_result_round_trips_through_json(qkv, tmp_path):
    _, result = qkv
    result.save(tmp_path / "joint.json")
    back = SearchResult.load(tmp_path / "joint.json")
    assert [sg.key() for sg in back.graphs] == [sg.key() for sg in result.graphs]
    assert back.instantiate(0).to_json() == result.instantiate(0).to_json()


def test_join_refuses_what_is_not_one_result_per_output(qkv):
    g, result = qkv
    with pytest.raises(InputError, match="one search result per output"):
        join(g, [result])
    with pytest.raises(InputError, match="parts\\[0\\] is not a search result"):
        join(g, [object(), result, result])


def test_superoptimize_takes_one_kernel_for_q_k_and_v(tmp_path):
    g = norm_qkv(residual=True)
    opt = superoptimize(g, budget=2, compile=False, cache=tmp_path, device="cpu", search_options=QUICK)
    assert opt.launches == 2       # the residual's kernel, and one for Q, K and V
    assert any("outputs 1+2+3 in one kernel" in n and n.endswith(": taken") for n in opt.report.notes)
    assert opt.report.best.label.startswith("output 0: ") and " + outputs 1+2+3: " in opt.report.best.label
    xs = draw(g, 1)
    want = [xs[0] + xs[1], *torch_norm_qkv(xs[0] + xs[1], *xs[2:])]
    for a, b in zip(opt.run([x.float() for x in xs]), want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    assert opt.check()["ok"]
    again = superoptimize(g, budget=2, compile=False, cache=tmp_path, device="cpu", search_options=QUICK)
    assert again.report.cached and again.graph.to_json() == opt.graph.to_json()
