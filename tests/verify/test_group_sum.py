"""Split-KV partials passed between kernels: kept side by side by kernel 1, summed in groups by kernel 2.

The group sum's verification form (part and red over the parallel dims that concatenated its groups,
prism.verify.encode) is checked against the op's meaning at several sizes; the Mirage-style split-KV
attention verifies; and mutants that group the partials wrongly are refused by the verifier and are
numerically wrong too (a refusal of a right graph would be a bug of its own)."""

import pytest
import torch

import prism.workloads as wl
from prism import interp, verify
from prism.ir import BlockGraph, KernelGraph
from prism.ir.ops import OPS
from prism.verify import expr as E
from prism.verify.encode import NotEncodable, PARALLEL_FORMS
from prism.verify.model import evaluate

CFG = {"b": 2, "g": 4, "h": 32, "d": 8}


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("members", [1, 2, 3, 4])
def test_the_parallel_form_is_the_op_at_every_size(size, members):
    """Members of a family over p (row sums of p chunks of Y, each `size` wide) concatenated along the
    columns, then summed in groups: the op's torch meaning and its verification form agree."""
    y = E.Var("Y", (6 * 4, size))                  # 24 rows: every member count here divides them
    partials = E.comb(E.sum_(E.part(y, 1, "p"), 1), 0, "p")
    env = {"Y": torch.randn(24, size, dtype=torch.float64, generator=torch.Generator().manual_seed(members))}
    sizes = {"p": members}
    concatenated = evaluate(partials, env, sizes).data
    assert concatenated.shape == (1, size * members)
    want = OPS["group_sum"].torch_fn(concatenated, dim=1, size=size)
    got = evaluate(PARALLEL_FORMS["group_sum"]([partials], 0, size), env, sizes).data
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, env["Y"].sum(0, keepdim=True), rtol=1e-12, atol=1e-12)


def test_groups_no_grid_dim_made_are_not_encodable():
    with pytest.raises(NotEncodable, match="concatenated"):
        PARALLEL_FORMS["group_sum"]([E.Var("X", (2, 8))], 0, 4)


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_split_kv_form_with_partials_verifies_and_runs(name):
    w = wl.get(name)
    for cfg in (CFG, *w.configs):
        fused = w.fused(cfg, splits=4, loop=2, partials=True)
        verdict = verify.equivalent(w.build(cfg), fused)
        assert verdict.equal, f"{cfg}: {verdict.reason}"
    fused = w.fused(CFG, splits=4, loop=2, partials=True)
    assert verify.random_test(w.build(CFG), fused).equal
    inputs = w.inputs(CFG, dtype=torch.float64, seed=1)
    (got,) = interp.run(fused, inputs, torch.float64)
    torch.testing.assert_close(got, w.reference(*inputs), rtol=1e-9, atol=1e-9)


def split_kv(cfg, grouping="contiguous", splits=4, loop=2):
    """The paper's split-KV attention with the denominators' partials concatenated along the queries
    ([b, splits·g, 1]), then folded back by kernel 2 as `grouping` says: "contiguous" (group_sum, groups of
    g: right), "strided" (each block sums a run of `splits` neighbours: the other way to read the
    concatenation), "one group" (group_sum with groups of 1 over the queries: the wrong group size, a
    [b, 1, 1] total that broadcasts in the division)."""
    b, q_, h, d = cfg["b"], cfg["g"], cfg["h"], cfg["d"]
    g = KernelGraph()
    q, kt, v = g.input((b, q_, d), "float16", "Q"), g.input((b, d, h), "float16", "Kt"), \
        g.input((b, h, d), "float16", "V")
    k1 = BlockGraph(grid=(b, splits), loop=loop)
    bq, bk = k1.input(q, imap={"x": 0}), k1.input(kt, imap={"x": 0, "y": 2}, fmap=2)
    bv = k1.input(v, imap={"x": 0, "y": 1}, fmap=1)
    e = k1.exp(k1.matmul(bq, bk))
    k1.output(k1.accum(k1.matmul(e, bv)), omap={"x": 0, "y": 2})          # [b, g, splits·d]
    k1.output(k1.accum(k1.sum(e, 2)), omap={"x": 0, "y": 1})              # [b, splits·g, 1]
    num, den = g.custom(k1, [q, kt, v])
    if grouping == "strided":
        k2 = BlockGraph(grid=(b, q_), loop=1)
        t = k2.input(den, imap={"x": 0, "y": 1})                          # [1, splits, 1]: a run of neighbours
        k2.output(k2.accum(k2.sum(t, 1)), omap={"x": 0, "y": 1})
        (den,) = g.custom(k2, [den])
    else:
        den = g.group_sum(den, 1, q_ if grouping == "contiguous" else 1)
    g.output(g.div(g.group_sum(num, 2, d), den))
    return g


def test_the_mutants_base_is_right():
    ref = wl.get("attention").build(CFG)
    assert verify.equivalent(ref, split_kv(CFG)).equal
    assert verify.random_test(ref, split_kv(CFG)).equal


@pytest.mark.parametrize("grouping", ["strided", "one group"])
def test_wrong_groupings_are_rejected_and_numerically_wrong(grouping):
    ref = wl.get("attention").build(CFG)
    mutant = split_kv(CFG, grouping, splits=CFG["g"])   # as many splits as queries: the shapes still fit
    assert not verify.random_test(ref, mutant).equal, "the mutant is right: the test is wrong"
    verdict = verify.equivalent(ref, mutant)
    assert not verdict.equal, f"UNSOUND: {grouping} grouping proved equal"


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("members", [1, 2, 3, 4])
def test_group_max_and_group_scale_forms_are_the_ops_at_every_size(size, members):
    """As for the group sum: members concatenated along the columns (`size` wide each, and one scale
    each), then their max in groups, and each group times its scale."""
    y, z = E.Var("Y", (6 * 4, size)), E.Var("Z", (6 * 4, 1))
    partials = E.comb(E.sum_(E.part(y, 1, "p"), 1), 0, "p")
    scales = E.comb(E.sum_(E.part(z, 1, "p"), 1), 0, "p")
    gen = torch.Generator().manual_seed(members)
    env = {"Y": torch.randn(24, size, dtype=torch.float64, generator=gen),
           "Z": torch.randn(24, 1, dtype=torch.float64, generator=gen)}
    sizes = {"p": members}
    x, s = evaluate(partials, env, sizes).data, evaluate(scales, env, sizes).data
    assert x.shape == (1, size * members) and s.shape == (1, members)
    for op, args, got in [
            ("group_max", [x], PARALLEL_FORMS["group_max"]([partials], 0, size)),
            ("group_scale", [x, s], PARALLEL_FORMS["group_scale"]([partials, scales], 0, size))]:
        want = OPS[op].torch_fn(*args, dim=1, size=size)
        torch.testing.assert_close(evaluate(got, env, sizes).data, want, rtol=1e-12, atol=1e-12)


def test_scales_grouped_otherwise_are_not_encodable():
    """Scales concatenated by another parallel dim than the groups: no member-by-member form."""
    x = E.comb(E.part(E.Var("X", (8, 2)), 1, "p"), 0, "p")
    s = E.comb(E.part(E.Var("S", (8, 1)), 1, "q"), 0, "q")
    with pytest.raises(NotEncodable, match="groups"):
        PARALLEL_FORMS["group_scale"]([x, s], 0, 2)
