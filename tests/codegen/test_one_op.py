"""Kernel-level ops lowered to one-op µGraphs mean what the ops mean (checked by the reference executor)."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import prism
from prism import interp
from prism.codegen import to_custom
from prism.codegen.one_op import ROW
from tests.strategies import kernel_graphs


def _same(g, seed=0):
    lowered, _ = to_custom(g)
    assert all(n.op in ("input", "custom") for n in lowered.nodes)
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.5 for t in g.inputs]
    for got, want in zip(interp.run(lowered, xs, torch.float64), interp.run(g, xs, torch.float64)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("name", prism.workloads.names())
def test_unfused_workloads(name):
    w = prism.workloads.get(name)
    cfg = {k: v + v // 2 for k, v in w.small.items()}     # sizes that are not powers of two
    _same(w.build(cfg, "float32"))


@pytest.mark.parametrize("shape, op, attrs", [
    ((3, 5, 7), "sum", {"dim": 1}),
    ((2, 3, 4, 5), "sum", {"dim": 0}),
    ((6, 10), "rms_norm", {"eps": 0.0}),
    ((2, 2 * ROW), "rms_norm", {"eps": 1e-5}),     # rows longer than one tile: two kernels
    ((5000,), "exp", {}),
])
def test_single_ops(shape, op, attrs):
    g = prism.KernelGraph()
    g.output(g.apply(op, [g.input(shape, "float32")], attrs))
    _same(g)
    if op == "rms_norm" and shape[-1] > ROW:
        assert len(to_custom(g)[0].nodes) == 3


@pytest.mark.parametrize("a, b", [((7, 96), (96, 130)), ((3, 4, 16, 32), (3, 4, 32, 8)), ((2, 5, 6), (2, 6, 1))])
def test_matmuls(a, b):
    g = prism.KernelGraph()
    g.output(g.matmul(g.input(a, "float32"), g.input(b, "float32")))
    _same(g)


@pytest.mark.parametrize("a, b, grid, tile", [
    ((2, 32, 1, 128), (2, 32, 128, 4096), (64, 32, 2), (1, 1, 1, 64)),   # decode Q @ Kt per KV head
    ((2, 32, 1, 4096), (2, 32, 4096, 128), (32, 2, 2), (1, 1, 1, 64)),  # P @ V
    ((8, 16, 2048), (8, 2048, 1408), (22, 8), (1, 16, 64)),             # an MoE expert's batch of tokens
    ((3, 5, 7, 16, 8), (3, 5, 7, 8, 128), (7, 5, 3), (1, 1, 1, 16, 128)),  # four dims of tiles: N's two stay whole
])
def test_a_matmul_grid_goes_over_the_dims_with_most_tiles(a, b, grid, tile):
    """The grid covers the output dims with the most tiles, whichever they are, so no block holds a batch dim
    whole while a grid dim goes over a single M tile (what GQA's unfused program did: 32 heads in a block)."""
    g = prism.KernelGraph()
    g.output(g.matmul(g.input(a, "float32"), g.input(b, "float32")))
    (block,) = [n.attrs["block"] for n in to_custom(g)[0].nodes if n.op == "custom"]
    assert block.grid == grid
    (mm,) = [n for _, n in block.topo() if n.op == "matmul"]
    assert mm.outputs[0].shape == tile
    _same(g)


def test_broadcasting_binary_ops():
    g = prism.KernelGraph()
    x, r, c = g.input((6, 1, 8), "float32"), g.input((1, 5, 8), "float32"), g.input((6, 5, 1), "float32")
    g.output(g.div(g.sub(x, r), c))
    _same(g)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kernel_graphs(dtypes=("float32",), max_ops=5, max_customs=1))
def test_random_kernel_graphs(g):
    _same(g)


def test_an_element_wise_chain_is_one_kernel():
    """rms_norm's finish after a split-K sum: mul_scalar, add_scalar, sqrt on [n, 1] and the div that broadcasts it
    run as one kernel; a value used twice (here x - r, by both the exp and the output) or one that is a graph
    output starts a kernel of its own."""
    g = prism.KernelGraph()
    p, ss = g.input((6, 40), "float32"), g.input((6, 1), "float32")
    g.output(g.div(p, g.sqrt(g.add_scalar(g.mul_scalar(ss, 0.25), 1e-6))))
    lowered, tags = to_custom(g)
    assert list(tags.values()) == ["mul_scalar_add_scalar_sqrt_div"]
    _same(g)

    g = prism.KernelGraph()
    x, r = g.input((6, 40), "float32"), g.input((6, 40), "float32")
    d = g.sub(x, r)
    e = g.exp(d)
    g.output(g.mul(e, g.silu(e)), d)
    lowered, tags = to_custom(g)
    assert sorted(tags.values()) == ["exp", "silu_mul", "sub"]
    _same(g)
