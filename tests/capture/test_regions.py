"""prism.capture.partition.regions: cones that compute a node in common join into one region with several
outputs (the norm that Q, K and V project), only where everything they read is there before the region's op;
the backend takes such a region whole, or cone by cone where it cannot."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import prism.capture as pc
from prism.capture.aten import op_name
from prism.capture.lower import lower
from prism.capture.partition import Cone, cones, regions
from prism.errors import UnsupportedOp
from tests.conftest import example

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _aten(module: torch.nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    with torch.no_grad():
        return make_fx(module)(*inputs)   # weights become get_attr nodes, read where used


def test_the_norm_joins_q_k_and_v_into_one_region():
    layer, inputs = example("decoder_layer").example()
    found = cones(_aten(layer, *inputs).graph)
    joined = regions(found)
    (qkv,) = [r for r in joined if len(r.roots) > 1]
    assert len(qkv.roots) == 3 and len(qkv.parts) == 3 and all(op_name(n) == "aten.mm.default" for n in qkv.roots)
    assert sum("aten.rsqrt.default" == op_name(n) for n in qkv.nodes) == 1        # the norm, once
    assert len(joined) == len(found) - 2 and all(not r.parts for r in joined if r is not qkv)


class LateRead(torch.nn.Module):
    """Two projections of one norm, the second's input scaled by a value computed from the first: their cones
    share the norm, but the second reads what exists only after the first root."""

    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk = torch.nn.Linear(16, 8, bias=False), torch.nn.Linear(16, 8, bias=False)

    def forward(self, x):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        q = self.wq(n)
        return q, self.wk(n * q.mean())


def test_cones_that_read_a_later_value_stay_apart():
    graph = _aten(LateRead(), torch.rand(4, 16)).graph
    found = cones(graph)
    assert len(found) == 2 and set(found[0].nodes) & set(found[1].nodes)   # they share the norm
    assert [len(r.roots) for r in regions(found)] == [1, 1]


class ResidualStack(torch.nn.Module):
    """Layers on a residual stream: each adds a projection of its norm, then a gated MLP of its norm (pre-norm,
    Llama's), or adds the norm of a projection, then the norm of a gated MLP (post-norm, OLMo-2's)."""

    def __init__(self, post: bool, layers: int = 3, d: int = 16) -> None:
        super().__init__()
        self.post = post
        self.o = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, 2 * d, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(2 * d, d, bias=False) for _ in range(layers))

    def forward(self, x):
        def norm(v):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)

        for o, up, down in zip(self.o, self.up, self.down):
            if self.post:
                x = x + norm(o(x))
                x = x + norm(down(torch.nn.functional.silu(up(x))))
            else:
                x = x + o(norm(x))
                x = x + down(torch.nn.functional.silu(up(norm(x))))
        return x


@pytest.mark.parametrize("post", [False, True], ids=["pre-norm", "post-norm"])
def test_a_cone_reads_the_residual_stream_another_cone_writes_rather_than_recompute_it(post):
    """Each residual add is used by the next layer's ops and the next add, so it may be computed twice; but
    another cone writes it (its root). Recomputed, every cone of a residual add pulled in the adds of all the
    layers before it (up to the op limit): a GPT-2's last region held its whole residual stream, and its search
    took most of the model's compile; in a post-norm model each add's norm came along, and the cones that
    shared them joined into regions of four outputs whose search did not end in minutes."""
    found = cones(_aten(ResidualStack(post), torch.rand(1, 2, 16)).graph)   # 3-D: each matmul viewed back
    roots = {c.root for c in found}
    for cone in found:
        assert not roots & set(cone.nodes) - {cone.root}, (cone.name, [n.name for n in cone.nodes])
    norms = collections.Counter(n for c in found for n in c.nodes if op_name(n) == "aten.rsqrt.default")
    assert len(norms) == 6 and set(norms.values()) == {1}   # every norm fused, none computed twice
    assert all(len(r.roots) == 1 for r in regions(found))


class HeadNormedK(torch.nn.Module):
    """Qwen3's K: the input norm, the projection, a norm over each head, the heads' transpose."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.k = heads, torch.nn.Linear(d, d, bias=False)

    def forward(self, x):
        def norm(v):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)

        b, s, d = x.shape
        return norm(self.k(norm(x)).view(b, s, self.heads, d // self.heads)).transpose(1, 2)


def test_where_a_matmul_cannot_be_lowered_for_what_follows_it_the_part_ending_at_it_is_a_cone():
    """Cut at the projection, Qwen3's K cone would leave no matmul: the projection went to torch. The part before
    the cut, ending at the projection (the input norm with it), is a cone of its own, and it lowers."""
    graph = _aten(HeadNormedK(), torch.rand(2, 4, 32)).graph
    (cone,) = cones(graph)
    mm = next(n for n in cone.nodes if op_name(n) == "aten.mm.default")
    with pytest.raises(UnsupportedOp) as failed:
        lower(cone.nodes, cone.inputs(), cone.roots)
    assert failed.value.node is mm
    part = cone.before(mm)
    assert part.roots == [mm] and sum(op_name(n) == "aten.rsqrt.default" for n in part.nodes) == 1
    _, _, shapes = lower(part.nodes, part.inputs(), part.roots)   # lowers: the projection stays Prism's
    assert shapes == [tuple(mm.meta["val"].shape)]


class CastNormMLP(torch.nn.Module):
    """What a float16 Hugging Face decoder emits around its gated MLP: the norm upcasts to float32 and casts
    back before its weight, and each Linear on the [batch, seq, hidden] activation views it to 2-D and back."""

    def __init__(self, d: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(d))
        self.gate, self.up = torch.nn.Linear(d, hidden, bias=False), torch.nn.Linear(d, hidden, bias=False)

    def forward(self, h):
        x = h.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        n = self.weight * x.to(h.dtype)
        return torch.nn.functional.silu(self.gate(n)) * self.up(n)


def test_layout_ops_do_not_count_against_a_cones_op_limit():
    """The casts and views around a float16 model's norm are layout: with them counted, the 16-op limit cut the
    norm in two and left its mean to torch (seen on a Llama-shaped model: the MLP's region then had no fused
    form at all). The whole norm is in the cone, and its ops other than layout stay within the limit."""
    from prism.capture.partition import VIEWS

    module = CastNormMLP().half()
    (cone,) = cones(_aten(module, torch.rand(1, 1, 64).half()).graph, max_ops=16)
    names = [op_name(n) for n in cone.nodes]
    assert {"aten.mean.dim", "aten.pow.Tensor_Scalar", "aten.rsqrt.default", "aten.silu.default"} <= set(names)
    assert sum(n not in VIEWS for n in names) <= 16 < len(names)


def test_a_region_prism_cannot_take_whole_is_taken_cone_by_cone(options, monkeypatch):
    """A region whose joint lowering fails is not lost: each of its cones is taken as it would be alone."""
    from prism.capture import backend

    layer, inputs = example("decoder_layer").example()
    real = backend._static

    def refuse_regions(cone, *args, **kwargs):
        if len(cone.roots) > 1:
            raise RuntimeError("no region today")
        return real(cone, *args, **kwargs)

    monkeypatch.setattr(backend, "_static", refuse_regions)
    torch._dynamo.reset()
    with torch.no_grad():
        want = layer(*inputs)
        got = torch.compile(layer, backend="prism")(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    replaced = pc.history[-1]["replaced"]
    assert len(replaced) == 7 and not [r for r in replaced if "," in r["root"]]


class SharedNorm(torch.nn.Module):
    """A norm whose output, viewed into heads, is scaled (in the part) and also read by an op outside it (the flip
    stands for RoPE's rotate_half, which torch computes)."""

    def forward(self, x):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        v = n.view(4, 2, 8)
        return v * 2.0, v.flip(-1)


def test_a_part_whose_value_others_read_through_a_view_ends_at_that_value():
    """Rooted at the scaling, the part would compute the norm and torch would compute it again for the flip: the
    part ends at the norm instead, which the flip then reads."""
    graph = _aten(SharedNorm(), torch.rand(4, 16)).graph
    nodes = [n for n in graph.nodes if op_name(n) not in ("aten.flip.default", "output") and n.op == "call_function"]
    scale = nodes[-1]
    norm = next(n for n in nodes if op_name(n) == "aten.view.default").all_input_nodes[0]
    part = Cone([scale], nodes).shared_values()
    assert part.roots == [norm] and scale not in part.nodes and part.reduces
    assert Cone([norm], part.nodes).shared_values() is None      # nothing of it is read elsewhere
