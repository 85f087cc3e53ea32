"""The reference executor's two ways of running a fused kernel, block by block and every block at once
(prism.interp.executor), compared on every kernel of the code generator's cases (tests/codegen)."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import prism
from prism import interp
from tests.strategies import block_graphs


def _kernels(graph, inputs):
    """(block graph, its float64 inputs) of each fused kernel of `graph`, run on `inputs` block by block."""
    values = dict(zip(graph.input_refs, (x.double() for x in inputs)))
    out = []
    for i, node in graph.topo():
        args = [values[r] for r in node.inputs]
        if node.op == "custom":
            out.append((node.attrs["block"], args))
            values.update(((i, k), t) for k, t in enumerate(interp.run_block(node.attrs["block"], args, together=False)))
        elif node.op != "input":
            values[(i, 0)] = prism.ir.ops.OPS[node.op].torch_fn(*args, **node.attrs)
    return out


def _cases():
    from tests.codegen.cases import CASES
    from tests.codegen.ragged_cases import RAGGED
    small = {n: make for n, make in CASES.items() if not n.startswith(("searched", "gemv", "split_gemv", "split_dot"))}
    return {**small, **{f"ragged_{n}": make for n, make in RAGGED.items()}}


@pytest.mark.parametrize("name", sorted(_cases()))
def test_all_blocks_at_once_compute_what_block_by_block_does(name):
    """On every kernel of the code generator's cases whose splits are even, the same outputs to float64 rounding; a
    kernel with a ragged split is run block by block (its blocks' tiles differ in shape)."""
    case = _cases()[name]()
    for block, args in _kernels(case.graph, case.inputs):
        want = interp.run_block(block, args, together=False)
        got = interp.run_block(block, args)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            assert float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max())), name



@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(block_graphs(dtypes=("float32",), max_ops=6))
def test_all_blocks_at_once_compute_what_block_by_block_does_on_random_block_graphs(b):
    """Random block graphs (tests/strategies.py): every op, accumulator and map the strategy draws, operands that
    differ along some grid dims and are the same along others."""
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in b.input_types]
    for a, w in zip(interp.run_block(b, args), interp.run_block(b, args, together=False)):
        assert a.shape == w.shape
        assert torch.allclose(a, w, rtol=1e-12, atol=1e-12, equal_nan=True)
