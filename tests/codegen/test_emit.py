"""The generated Triton source: pinned for RMSNorm, and the properties every kernel must have."""

import ast
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import prism
from prism import codegen
from prism.codegen.layout import Layout
from tests.codegen.cases import CASES
from tests.strategies import kernel_graphs

SNAPSHOTS = Path(__file__).parent / "snapshots"


def _source(name, cfg, **params):
    return codegen.compile_graph(prism.workloads.get(name).fused(cfg, **params)).source


def test_rmsnorm_source_snapshot():
    """RMSNorm's fused kernel at n=4, d=64, grid 2, loop 2 (PRISM_UPDATE_SNAPSHOTS=1 rewrites the file)."""
    got = _source("rmsnorm", {"n": 4, "d": 64}, grid=2, loop=2)
    path = SNAPSHOTS / "rmsnorm_n4_d64_grid2_loop2.py.txt"
    if os.environ.get("PRISM_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert got == path.read_text()


def test_rows_padded_to_16_for_tl_dot_and_masked():
    src = _source("rmsnorm", {"n": 8, "d": 64}, grid=2, loop=2)
    assert "BLOCK_X0: tl.constexpr,  # 16 lanes" in src and "TILE_X0: tl.constexpr,  # 8 real lanes" in src
    assert "mask_x0 = tl.arange(0, BLOCK_X0) < TILE_X0" in src
    assert "tl.load(x_ptrs, mask=mask_x, other=0.0)" in src
    assert "tl.store(out0_ptrs, t10.to(out0_ptr.dtype.element_ty), mask=mask_out0)" in src


def test_dim_split_by_grid_and_loop_has_block_stride_tile_times_loop():
    src = _source("attention", {"b": 2, "g": 4, "h": 64, "d": 16}, splits=2, loop=2)
    assert "offs_kt2 = pid_y * BLOCK_KT2 * LOOP + tl.arange(0, BLOCK_KT2)" in src
    assert "kt_ptrs += BLOCK_KT2 * stride_kt2" in src


def test_every_dim_is_addressed_through_its_stride():
    src = _source("attention", {"b": 2, "g": 4, "h": 64, "d": 16})
    for t in ("q", "kt", "v"):
        assert f"stride_{t}0, stride_{t}1, stride_{t}2,  # strides of" in src
        assert f"{t}.stride(0), {t}.stride(1), {t}.stride(2)," in src


def test_silu_and_binary_ops_render_from_the_op_table():
    src = _source("swiglu", {"n": 4, "d": 64}, grid=2, loop=2)
    assert re.search(r"(\w+) = (\w+) \* tl\.sigmoid\(\2\)", src)
    assert re.search(r"= \w+ \* \w+  #", src) and " / " not in src.split("# -- after the loop")[1]


def test_summed_outputs_are_combined_in_their_own_launch():
    """Split-K (prism.codegen.split): one kernel writes the fp16 output itself, its fp32 partials and the row
    counters; no buffer is zeroed per call and no cast kernel follows."""
    cg = codegen.compile_graph(CASES["split_k"]().graph)
    (main,) = cg.kernels
    assert main.outputs == ("float16", "float32", "int32") and main.summed == (True, False, False)
    assert "tl.atomic_add(out0" not in main.source and "must be zero (each launch leaves them so)" in main.source
    assert "for j in range(0, 2):  # in slot order" in main.source
    shapes = [(b.shape, b.dtype, b.persistent) for b in cg.plan.buffers[2:]]
    assert shapes == [((8, 32), "float16", False), ((2, 8, 32), "float32", False), ((2,), "int32", True)]


def test_intermediates_between_kernels_are_fp32():
    g = prism.workloads.get("attention").fused({"b": 2, "g": 4, "h": 64, "d": 16}, splits=2)
    k1, k2 = codegen.compile_graph(g).kernels
    assert k1.outputs == ("float32",) * 4 + ("int32",) and k1.summed == (True, True, False, False, False)
    assert k2.inputs == ("float32", "float32") and k2.outputs == ("float16",)


def test_layout_pads_to_powers_of_two_and_dot_minimum():
    g = prism.workloads.get("rmsnorm_mlp").fused({"n": 3, "d": 96}, grid=2, loop=2)
    block = g.nodes[next(i for i, n in enumerate(g.nodes) if n.op == "custom")].attrs["block"]
    layout = Layout(block, ["x", "wup", "wgate"])
    x = layout.dims[block.loaders[0]]
    assert [(t.tile, t.block) for t in x] == [(3, 16), (48, 64)]      # rows: tl.dot minimum; K: next 2^k
    w = layout.dims[block.loaders[1]]
    assert [(t.tile, t.block) for t in w] == [(48, 64), (48, 64)]
    ss = [i for i, n in block.topo() if n.op == "sum"][0]
    assert [(t.tile, t.block) for t in layout.dims[ss]] == [(3, 16), (1, 1)]   # broadcast dim stays 1


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kernel_graphs(dtypes=("float16", "float32"), max_ops=4, max_customs=2))
def test_random_graphs_generate_valid_python(g):
    cg = codegen.compile_graph(g)
    tree = ast.parse(cg.source)
    kernels = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("kernel_")]
    assert kernels == [k.name for k in cg.kernels]
    for k in cg.kernels:
        params = [a.arg for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == k.name
                  for a in f.args.args]
        assert params == list(k.signature)
        assert set(k.constexprs) <= set(params)


def test_grid_limits_are_reported():
    g = prism.KernelGraph()
    x = g.input((2, 70000), "float32")
    b = prism.BlockGraph(grid=(1, 70000), loop=1)
    b.output(b.accum(b.input(x, imap={"y": 1})), omap={"y": 1})
    g.output(*g.custom(b, [x]))
    with pytest.raises(codegen.CodegenError, match="65535"):
        codegen.compile_graph(g)
