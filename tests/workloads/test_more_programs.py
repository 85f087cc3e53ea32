"""GQA, nTrans and the MoE expert: every hand-written fused form runs in the reference executor
equal to torch and is proven equal to the program for all sizes; mutants that split a tile along the wrong dim
are refused by the verifier."""

import pytest
import torch

import prism.workloads as wl
from prism import interp
from prism.ir import BlockGraph, KernelGraph
from prism.verify import equivalent


def run(name, graph, cfg, seed=0):
    w = wl.get(name)
    xs = w.inputs(cfg, seed, torch.float64)
    (got,) = interp.run(graph, xs, torch.float64)
    return got, w.reference(*xs)


def check(name, cfg, verify=True, **params):
    """The fused form at `params` equals torch (float64) and the verifier proves it equal to the program."""
    w = wl.get(name)
    fused = w.fused(cfg, **params)
    got, want = run(name, fused, cfg)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    if verify:
        verdict = equivalent(w.build(cfg), fused)
        assert verdict.equal, verdict.reason
    return fused


GQA = wl.get("gqa").medium_config                     # b=2, k=2 KV heads, g=4 rows each, h=256, d=16


@pytest.mark.parametrize("params, kernels, grid", [
    ({}, 2, (2, 2, 1)),                                  # kv summed across splits, kernel 2 divides
    ({"splits": 4, "loop": 1}, 2, (2, 2, 4)),
    ({"splits": 2, "loop": 2, "partials": True}, 2, (2, 2, 2)),
    ({"online": True}, 1, (2, 2)),                     # one kernel per (batch, KV head), running max
    ({"online": True, "splits": 2, "loop": 2, "partials": True}, 2, (2, 2, 2)),   # FlashDecoding's form
])
def test_every_gqa_form_runs_and_verifies(params, kernels, grid):
    fused = check("gqa", GQA, **params)
    assert len(fused.blocks) == kernels and fused.blocks[0].grid == grid


@pytest.mark.parametrize("cfg", [
    {"b": 2, "k": 3, "g": 1, "h": 64, "d": 8},           # MHA decode: one query row per KV head
    {"b": 2, "k": 1, "g": 6, "h": 64, "d": 8},           # MQA: one KV head for every row
])
def test_gqa_covers_mha_and_mqa(cfg):
    """Run only: a grid dim over a dim of size 1 (k = 1, or kernel 2's g = 1) is no split the verifier proves
    at these sizes ('splits extent 1'); the proof for all sizes is the one above, with nothing of size 1."""
    for params in ({"online": True}, {"splits": 2, "loop": 1, "partials": True}):
        check("gqa", cfg, verify=False, **params)


def test_gqa_at_one_kv_head_is_attention():
    """k = 1 is attention's program with a size-1 dim in front: the same values."""
    cfg = {"b": 2, "k": 1, "g": 4, "h": 64, "d": 8}
    got, _ = run("gqa", wl.get("gqa").build(cfg), cfg)
    xs = [x.squeeze(1) for x in wl.get("gqa").inputs(cfg, 0, torch.float64)]
    torch.testing.assert_close(got.squeeze(1), wl.get("attention").reference(*xs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("grid", [1, 2, 4])
def test_ntrans_fused_runs_and_verifies(grid):
    check("ntrans", {"n": 4, "d": 128}, grid=grid)


def test_ntrans_normalizing_half_rows_is_rejected():
    """A mutant that also splits d over grid dim y normalizes half rows: wrong, and the verifier says so."""
    cfg = {"n": 4, "d": 128}
    w = wl.get("ntrans")
    g = KernelGraph()
    ins = [g.input((4, 128), "float16", n) for n in w.input_names]
    b = BlockGraph(grid=(4, 2), loop=1)
    h, x, a = (b.input(t, imap={"x": 0, "y": 1}) for t in ins)
    u = b.add(x, b.mul(a, b.sub(b.rms_norm(h, 1e-6), x)))
    b.output(b.rms_norm(b.accum(u), 1e-6), omap={"x": 0, "y": 1})
    g.output(*g.custom(b, ins))
    got, want = run("ntrans", g, cfg)
    assert not torch.allclose(got, want, rtol=1e-3, atol=1e-3)
    assert not equivalent(w.build(cfg), g).equal


MOE = wl.get("moe").medium_config                     # e=2, n=4, d=64, f=256: 4 tiles of f


@pytest.mark.parametrize("splits, loop", [(1, 4), (2, 2), (4, 1), (1, 256)])
def test_moe_fused_runs_and_verifies(splits, loop):
    check("moe", MOE, splits=splits, loop=loop)


def _moe(x_imap, w2_imap):
    """MoE's fused form at MOE with X and W2 loaded by the maps given (the mutants)."""
    g = KernelGraph()
    x, w1, w2 = (g.input(s, "float16", n) for s, n in [((2, 4, 64), "X"), ((2, 64, 256), "W1"),
                                                       ((2, 256, 64), "W2")])
    k = BlockGraph(grid=(2, 2), loop=2)
    bx, b1 = k.input(x, imap=x_imap), k.input(w1, imap={"x": 0, "y": 2}, fmap=2)
    b2 = k.input(w2, imap=w2_imap, fmap=1)
    k.output(k.accum(k.matmul(k.exp(k.matmul(bx, b1)), b2)), omap={"x": 0})
    g.output(*g.custom(k, [x, w1, w2]))
    return g


def test_moe_tiles_of_another_expert_are_rejected():
    """Each block must take its own expert's tokens and the W2 rows its W1 columns produced: tiles of another
    expert or split pair the wrong products (the executor disagrees, the verifier refuses); the right maps
    verify."""
    program = wl.get("moe").build(MOE)
    assert equivalent(program, _moe({"x": 0}, {"x": 0, "y": 1})).equal
    for mutant in (_moe({"x": 0}, {"x": 1, "y": 0}),     # W2: expert by the split dim, f by the expert dim
                   _moe({"y": 0}, {"x": 0, "y": 1})):    # X: the tokens of expert y, not x
        got, want = run("moe", mutant, MOE)
        assert not torch.allclose(got, want, rtol=1e-3, atol=1e-3)
        assert not equivalent(program, mutant).equal
