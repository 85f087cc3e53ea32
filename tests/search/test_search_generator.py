"""The generator: canonical order finds each structure once, pruning is sound, fused kernels pass it."""

import pytest

import prism.workloads as wl
from prism.ir.ops import OPS
from prism.search.generator import KERNEL_OPS, Generator, Limits, default_kernel_ops, default_max_ops
from prism.symbolic.dims import InvExtent
from prism.symbolic.draft import ACCUM_OP, BOp
from search_helpers import d1_terms, target_for
from tests.configs import small_cfg


def dag_signature(st) -> str:
    """A structure as a DAG, independent of the order its ops were added in."""
    g = st.graph

    def desc(i):
        op = g.ops[i]
        if op.op == "loader":
            return f"in{op.attrs[0]}"
        kids = [desc(j) for j in op.inputs]
        if op.op in ("add", "mul"):
            kids.sort()
        return f"{op.op}{op.attrs}({','.join(kids)})"
    values = [f"save({desc(o)})" for o in st.outputs]
    for k in st.kernel_ops:
        args = [values[i] for i in k.inputs]
        values.append(f"{k.op}({','.join(sorted(args) if k.op in ('add', 'mul') else args)})")
    return values[-1]


def unordered(gen: Generator):
    """Brute force: every op sequence (no canonical order), deduplicated by DAG at the end."""
    found, stack = set(), [gen.start()]
    while stack:
        s = stack.pop()
        found.update(dag_signature(st) for st in gen.emit(s))
        if len(s.ops) >= gen.max_ops:
            continue
        n = len(s.ops)
        ops = [BOp(ACCUM_OP, (i,)) for i in range(n) if not s.post[i] and s.n_accums < gen.limits.max_accums]
        for op, attrs in gen.vocab:
            if OPS[op].arity == 1:
                ops += [BOp(op, (i,), attrs) for i in range(n)]
            else:
                ops += [BOp(op, (i, j), attrs) for i in range(n) for j in range(n)
                        if (i != j or op == "matmul") and not (op in ("add", "mul") and i > j)]
        have = {(o.op, o.inputs, o.attrs) for o in s.ops}
        for bop in ops:
            if (bop.op, bop.inputs, bop.attrs) in have:
                continue  # the same op twice computes nothing new
            term = s.term(bop)
            if term in gen.target.subterms:
                child = s.extend(bop, term)
                if not isinstance(child, str) and not gen._hopeless(child):
                    stack.append(child)
    return found


@pytest.mark.parametrize("name,max_ops", [("swiglu", 8), ("attention", 9), ("rmsnorm", 9)])
def test_canonical_order_emits_every_structure_exactly_once(name, max_ops):
    w = wl.get(name)
    gen = Generator(target_for(w.build(small_cfg(w))), Limits(max_block_ops=max_ops, max_grid=1))
    found = [dag_signature(st) for st in gen.run(gen.start())]
    assert found and len(found) == len(set(found))
    assert set(found) == unordered(gen)


@pytest.mark.parametrize("name,max_ops", [("attention", 10), ("rmsnorm", 11), ("lora", 10), ("ntrans", 9)])
def test_the_budget_bound_never_prunes_a_structure(monkeypatch, name, max_ops):
    """Admissible: with the bound (the op count, then each pair of chains) the same structures as without."""
    w = wl.get(name)
    target = target_for(w.build(small_cfg(w)))
    gen = Generator(target, Limits(max_block_ops=max_ops))
    with_bound = sorted(dag_signature(st) for st in gen.run(gen.start()))
    monkeypatch.setattr(Generator, "_hopeless", lambda self, s: len(s.ops) > self.max_ops)
    gen2 = Generator(target, Limits(max_block_ops=max_ops))
    without = sorted(dag_signature(st) for st in gen2.run(gen2.start()))
    assert with_bound == without
    assert gen.stats["states"] < gen2.stats["states"]


def test_a_tensor_the_canonical_order_has_passed_is_pruned_only_where_no_two_input_op_can_finish_it(monkeypatch):
    """The bound's canonical-order rule prunes states, keeps every structure, and would lose some if it forgot that a
    passed tensor can still take an op with a newer operand."""
    w = wl.get("rmsnorm_linear")
    target = target_for(w.build(small_cfg(w)))

    def structures(gen):
        return sorted(dag_signature(st) for st in gen.run(gen.start()))
    gen = Generator(target, Limits(max_block_ops=12))
    found = structures(gen)
    assert gen.stats["pruned_late"] > 0
    forgetful = Generator(target, Limits(max_block_ops=12))
    forgetful.distance_by_pair = [float("inf")] * len(forgetful.distance_by_pair)
    assert len(structures(forgetful)) < len(found)
    monkeypatch.setattr(Generator, "_hopeless", lambda self, s: len(s.ops) > self.max_ops)
    assert structures(Generator(target, Limits(max_block_ops=12))) == found


@pytest.mark.parametrize("name", wl.names())
def test_every_tensor_of_the_hand_written_fused_kernel_passes_the_expression_check(name):
    """Expression-guided pruning under-prunes: the hand-written kernel survives it, tensor by tensor."""
    w = wl.get(name)
    cfg = small_cfg(w)
    graph = w.build(cfg)
    target = target_for(graph)
    shapes = [t.shape for t in graph.inputs]
    constants = {a[0].value(shapes): a[0] for _, a in target.vocabulary if a and isinstance(a[0], InvExtent)}
    block_terms, (out,) = d1_terms(w.fused(cfg), constants)
    missing = [t for t in block_terms if t not in target.subterms]
    assert not missing
    assert out in target.roots


def test_stats_count_every_kind_of_pruning():
    w = wl.get("rmsnorm")
    gen = Generator(target_for(w.build(small_cfg(w))), Limits())
    assert gen.max_ops == default_max_ops(gen.target) == 13
    found = list(gen.run(gen.start()))
    s = gen.stats
    assert s["emitted"] == len(found) > 0
    for key in ("states", "pruned_order", "pruned_expr", "pruned_phase", "pruned_budget"):
        assert s[key] > 0, key


@pytest.mark.parametrize("name, ops", [("rmsnorm", KERNEL_OPS), ("rmsnorm_linear", KERNEL_OPS), ("swiglu", 1),
                                       ("attention", 1), ("lora", 1)])
def test_kernel_level_ops_beyond_one_only_where_a_norm_divides_a_projection(name, ops):
    """rms_norm(X) @ W is also (X @ W) / sqrt(sum(X²)/d + eps): split over d, its kernel can only sum X @ W and
    sum(X²)/d, and eps, sqrt and the division come after it. Other programs keep one kernel-level op."""
    w = wl.get(name)
    assert default_kernel_ops(target_for(w.build(small_cfg(w)))) == ops
