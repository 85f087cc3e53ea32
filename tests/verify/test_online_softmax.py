"""The online softmax (running max, online accumulators) verified against the max-subtracted program, and
its mutants refused: by the block graph where the IR can tell (an unscaled sum of a scaled value), else by
the verifier, and each refused mutant is numerically wrong too (a refusal of a right graph would be a bug
of its own)."""

import pytest

import prism.workloads as wl
from prism import verify
from prism.errors import GraphError
from prism.ir import BlockGraph, KernelGraph
from prism.ir.kinds import ONLINE

CFGS = [{"b": 2, "g": 4, "h": 32, "d": 8}]


def online_attention(cfg, *, max_dim=2, running=True, rescale=True, splits=1, loop=4):
    """Attention's online form (prism.workloads.attention) with one thing changed at a time:
    max_dim: the dim of the tile max; running=False: the tile's own max, not the max so far (a stale max);
    rescale=False: the sums are plain sums; splits > 1: kv split over grid dim y, each split's online sums
    saved with y unmapped (summed across blocks although each is scaled by its own max), divided after."""
    g = KernelGraph()
    b, q_, h, d = cfg["b"], cfg["g"], cfg["h"], cfg["d"]
    q, kt, v = g.input((b, q_, d), "float16", "Q"), g.input((b, d, h), "float16", "Kt"), \
        g.input((b, h, d), "float16", "V")
    split = {"y": 1} if splits > 1 else {}  # grid dim y, when there is one, splits the kv length
    k = BlockGraph(grid=(b, splits) if split else (b,), loop=loop)
    bq = k.input(q, imap={"x": 0})
    bk = k.input(kt, imap={"x": 0, **{y: 2 for y in split}}, fmap=2)
    bv = k.input(v, imap={"x": 0, **split}, fmap=1)
    s = k.matmul(bq, bk)
    m = k.max(s, max_dim)
    if running:
        m = k.running_max(m)
    p = k.exp(k.sub(s, m))
    kind = dict(kind=ONLINE.name, running=m) if rescale and running else {}
    num, den = k.accum(k.matmul(p, bv), **kind), k.accum(k.sum(p, 2), **kind)
    if splits == 1:
        k.output(k.div(num, den), omap={"x": 0})
        (o,) = g.custom(k, [q, kt, v])
    else:
        k.output(num, omap={"x": 0})
        k.output(den, omap={"x": 0})
        parts = g.custom(k, [q, kt, v])
        o = g.div(*parts)
    g.output(o)
    return g


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_online_form_verifies_at_every_config(name):
    w = wl.get(name)
    for cfg in (*CFGS, *w.configs):
        fused = w.fused(cfg, online=True)
        verdict = verify.equivalent(w.build(cfg), fused)
        assert verdict.equal, f"{cfg}: {verdict.reason}"
    numeric = verify.random_test(w.build(CFGS[0]), w.fused(CFGS[0], online=True))
    assert numeric.equal, numeric.reason


def test_the_paper_form_and_the_online_form_are_both_the_program():
    """The program subtracts the max; the paper's exp/sum/div form has none, and is proved equal anyway
    (the ratio's invariance under a common shift)."""
    w = wl.get("attention")
    for fused in (w.fused(CFGS[0]), w.fused(CFGS[0], online=True)):
        assert verify.equivalent(w.build(CFGS[0]), fused).equal
    assert verify.equivalent(w.build(CFGS[0]), online_attention(CFGS[0])).equal  # the mutants' base


@pytest.mark.parametrize("mutation", [dict(running=False), dict(max_dim=1), dict(splits=2, loop=2)],
                         ids=["stale max", "max over the wrong dim", "online sums added across blocks"])
def test_mutants_are_rejected_and_numerically_wrong(mutation):
    ref = wl.get("attention").build(CFGS[0])
    try:
        mutant = online_attention(CFGS[0], **mutation)
    except GraphError:
        return  # refused as it was built: nothing to verify
    assert not verify.random_test(ref, mutant).equal, "the mutant is right: the test is wrong"
    verdict = verify.equivalent(ref, mutant)
    assert not verdict.equal, f"UNSOUND: {mutation} proved equal"


def test_a_missing_rescale_is_refused_by_the_block_graph():
    """A plain sum of a value scaled by a running max adds terms of different scales: never built."""
    with pytest.raises(GraphError, match="running max"):
        online_attention(CFGS[0], rescale=False)


def test_the_online_accumulator_needs_its_running_max():
    k = BlockGraph(grid=(1,), loop=2)
    x = k.input(KernelGraph().input((4, 8), "float16"), fmap=1)
    with pytest.raises(GraphError, match="running"):
        k.accum(x, ONLINE.name)
    with pytest.raises(GraphError, match="running"):
        k.accum(x, running=k.running_max(k.max(x, 1)))


# ---- the safe split-KV form: each split's own running max, rescaled to the largest in kernel 2 ----------------

def split_combine(cfg, *, scale_num=True, scale_den=True, max_dim=2, splits=4, loop=2):
    """The safe split-KV form (prism.workloads.attention, online with partials) with kernel 2 changed:
    scale_num/scale_den=False: that sum's splits are added without rescaling to the largest max;
    max_dim=1: the "largest" max is taken over dim 1 (each split's own, so every scale is 1, a stale max)."""
    w = wl.get("attention")
    fused = w.fused(cfg, online=True, splits=splits, loop=loop, partials=True)
    k1 = fused.blocks[0]
    g = KernelGraph()
    q, kt, v = (g.input(t.shape, t.dtype, t.name) for t in fused.inputs)
    num, den, mx = g.custom(k1, [q, kt, v])
    k2 = BlockGraph(grid=(cfg["b"], cfg["g"]), loop=1)
    imap = {"x": 0, "y": 1}
    n2, d2, m2 = (k2.accum(k2.input(t, imap=imap)) for t in (num, den, mx))
    scale = k2.exp(k2.sub(m2, k2.group_max(m2, max_dim, 1)))
    if scale_num:
        n2 = k2.group_scale(n2, scale, 2, cfg["d"])
    if scale_den:
        d2 = k2.group_scale(d2, scale, 2, 1)
    k2.output(k2.div(k2.group_sum(n2, 2, cfg["d"]), k2.group_sum(d2, 2, 1)), omap=imap)
    g.output(*g.custom(k2, [num, den, mx]))
    return g


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_safe_split_kv_form_verifies_at_every_config(name):
    w = wl.get(name)
    for cfg in (*CFGS, *w.configs):
        fused = w.fused(cfg, online=True, splits=4, loop=2, partials=True)
        verdict = verify.equivalent(w.build(cfg), fused)
        assert verdict.equal, f"{cfg}: {verdict.reason}"
    numeric = verify.random_test(w.build(CFGS[0]), w.fused(CFGS[0], online=True, splits=4, loop=2, partials=True))
    assert numeric.equal, numeric.reason


@pytest.mark.parametrize("mutation", [dict(scale_num=False, scale_den=False), dict(scale_den=False),
                                      dict(max_dim=1)],
                         ids=["no rescale", "numerator rescaled only", "each split's own max (stale)"])
def test_split_combine_mutants_are_rejected_and_numerically_wrong(mutation):
    ref = wl.get("attention").build(CFGS[0])
    assert verify.equivalent(ref, split_combine(CFGS[0])).equal  # the mutants' base
    mutant = split_combine(CFGS[0], **mutation)
    assert not verify.random_test(ref, mutant).equal, "the mutant is right: the test is wrong"
    verdict = verify.equivalent(ref, mutant)
    assert not verdict.equal, f"UNSOUND: {mutation} proved equal"


def test_the_online_form_splits_only_with_partials():
    """Several splits keep their sums as partials; with partials and no split count, the default split."""
    from prism.workloads import WorkloadError

    w = wl.get("attention")
    with pytest.raises(WorkloadError, match="partials"):
        w.fused(CFGS[0], online=True, splits=4, loop=2)
    assert [b.grid for b in w.fused(CFGS[0], online=True, partials=True).blocks] == [(2, 1), (2, 4)]
    assert [b.grid for b in w.fused(CFGS[0], online=True, splits=1, partials=True).blocks] == [(2, 1), (2, 4)]
