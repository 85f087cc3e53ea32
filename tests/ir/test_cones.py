"""KernelGraph.output_cone and replay: a program with several outputs split into one program per output,
and graphs joined back into one (what superoptimize does with several outputs)."""

import pytest
import torch

from prism import interp
from prism.errors import GraphError
from prism.ir import KernelGraph


def residual_and_projection():
    """H = X + R kept as an output, and rms_norm(H) @ W; W is read by output 1 only."""
    g = KernelGraph()
    x, r, w = g.input((4, 8), "float32", "X"), g.input((4, 8), "float32", "R"), g.input((8, 6), "float32", "W")
    h = g.add(x, r)
    g.output(g.matmul(g.rms_norm(h, 1e-6), w), h)
    return g


def inputs(g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.5 for t in g.inputs]


def test_each_cone_is_its_output_alone():
    g = residual_and_projection()
    xs = inputs(g)
    want = interp.run(g, xs, torch.float64)
    for k, used in [(0, [0, 1, 2]), (1, [0, 1])]:
        cone, got_used = g.output_cone(k)
        assert got_used == used and [t.name for t in cone.inputs] == [g.inputs[j].name for j in used]
        assert len(cone.outputs) == 1
        (out,) = interp.run(cone, [xs[j] for j in used], torch.float64)
        assert torch.equal(out, want[k])
    assert [n.op for n in g.output_cone(1)[0].nodes] == ["input", "input", "add"]   # no norm, no matmul


def test_replay_joins_graphs_into_one():
    g = residual_and_projection()
    joined = KernelGraph()
    args = [joined.input(t.shape, t.dtype, t.name) for t in g.inputs]
    outs = []
    for k in (1, 0):                                    # the cones in another order, joined
        cone, used = g.output_cone(k)
        outs += cone.replay(joined, [args[j] for j in used])
    joined.output(*outs)
    xs = inputs(g, 1)
    a, b = interp.run(g, xs, torch.float64)
    assert [t.shape for t in joined.output_tensors] == [(4, 8), (4, 6)]
    assert all(torch.equal(u, v) for u, v in zip(interp.run(joined, xs, torch.float64), [b, a]))


def test_bad_cones_and_replays_are_graph_errors():
    g = residual_and_projection()
    for k in (2, -1, "0", True):
        with pytest.raises(GraphError, match="does not exist; the graph has 2"):
            g.output_cone(k)
    other = KernelGraph()
    with pytest.raises(GraphError, match="replay: the graph has 3 input"):
        g.replay(other, [other.input((4, 8), "float32")])
    with pytest.raises(GraphError, match="belongs to another graph"):
        g.replay(other, g.inputs)
