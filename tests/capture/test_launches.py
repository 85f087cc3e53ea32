"""What a compiled graph launches per call (prism.capture.launches): Prism's kernels and torch's rest, counted in
Inductor's generated module or in the ATen graph that runs as it is, views launching nothing."""

from __future__ import annotations

import pytest
import torch

import prism.capture as pc
from prism.capture.launches import in_code, in_graph

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WRAPPER = '''
triton_poi_fused_cat_0 = async_compile.triton('triton_poi_fused_cat_0', \'\'\'
def triton_poi_fused_cat_0(in_ptr0, xnumel):
    helper.run(in_ptr0)          # inside the kernel's source: not a call of the graph
\'\'\', device_str='cuda')

class Runner:
    def call(self, args):
        arg0_1, arg1_1 = args
        buf0 = empty_strided_cuda((4, 8), (8, 1), torch.float16)
        extern_kernels.mm(arg0_1, arg1_1, out=buf0)
        buf1 = torch.ops.prism.g0123abcd.default([buf0, arg1_1])
        buf2 = buf1[0]
        buf3 = torch.ops.aten.view.default(buf2, [8, 4])
        stream0 = get_raw_stream(0)
        triton_poi_fused_cat_0.run(buf3, buf0, 32, stream=stream0)
        torch.ops.aten.index_put_.default(arg1_1, [buf0], buf3)
        return (reinterpret_tensor(buf2, (8, 4), (4, 1), 0), )


def get_args():
    arg0_1 = rand_strided((4, 8), (8, 1), device='cuda', dtype=torch.float16)
    return [arg0_1]


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat, device='cuda')
'''


def test_inductors_module_launches_its_kernels_library_calls_and_fallbacks_not_views_or_prisms_ops():
    assert in_code(WRAPPER) == ["mm", "triton_poi_fused_cat_0", "aten.index_put_.default"]
    cpu = "        cpp_fused_add_sin_0(arg3_1, buf0)\n        buf1 = torch.ops.aten.sort.default(buf0)\n"
    assert in_code(cpu) == ["cpp_fused_add_sin_0", "aten.sort.default"]


def test_a_reshape_launches_only_where_its_strides_allow_no_view():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, 8, device="meta").t()           # strides (1, 8): a transposed tensor
    merged = graph.call_function(torch.ops.aten.reshape.default, (x, [32]))          # a copy
    split = graph.call_function(torch.ops.aten.reshape.default, (x, [8, 2, 2]))      # a view
    seen = graph.call_function(torch.ops.aten.view.default, (split, [32]))
    graph.output((merged, seen))
    assert in_graph(torch.fx.GraphModule({}, graph)) == ["aten.reshape.default"]


class Rotated(torch.nn.Module):
    """A norm and a projection (Prism's) followed by a sine and a transposed copy (torch's)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = torch.nn.RMSNorm(32), torch.nn.Linear(32, 64, bias=False)

    def forward(self, x):
        return torch.sin(self.proj(self.norm(x))).transpose(0, 1).contiguous()


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_the_history_counts_every_launch_of_a_graph_prisms_and_the_rests(options, rest):
    torch.manual_seed(0)
    module, x = Rotated().eval(), torch.randn(8, 32)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(module, backend="prism", options={"rest": rest})(x)
    torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-4)
    record = pc.history[-1]
    count = record["launches"]
    assert len(record["replaced"]) == 1 and count["prism"] == record["replaced"][0]["launches"] >= 1
    assert count["total"] == count["prism"] + count["rest"] and count["rest"] == len(count["rest_kernels"])
    if rest == "eager":     # the views around Prism's op launch nothing
        assert count["rest_kernels"] == ["aten.sin.default", "aten.clone.default"]
    else:                   # Inductor fuses the sine into the copy
        assert len(count["rest_kernels"]) == 1 and "sin" in count["rest_kernels"][0], count


class DecodeAttention(torch.nn.Module):
    """A decode step's grouped-query attention on a query of [batch, 1, heads, dim] seen as [batch, heads, 1, dim]."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k, v, enable_gqa=True)


def test_input_steps_that_only_view_launch_nothing(options):
    """The query's steps into Prism's op: its transpose, then the view into groups of query heads. Its strides
    allow that view at one position, so nothing is copied: the steps' nodes carry their fake values, so the
    count can see it (without them the view counted as a copy)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 1, 4, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(DecodeAttention(), backend="prism", options={"rest": "eager"})(q, k, v)
    torch.testing.assert_close(got, DecodeAttention()(q, k, v), rtol=1e-5, atol=1e-5)
    record = pc.history[-1]
    assert len(record["replaced"]) == 1 and record["launches"]["rest_kernels"] == [], record["launches"]
