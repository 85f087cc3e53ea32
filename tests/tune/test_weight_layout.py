"""The layout a program's inputs are passed in (TuneOptions.strides): what the cost model counts, what the tuner
compiles and times, what the result cache keys; and the sweep of a small space on a GPU."""

from __future__ import annotations

import pytest
import torch

import prism
from prism.errors import InputError
from prism.ir import BlockGraph, KernelGraph, Launch
from prism.options import SWEEP, TuneOptions
from prism.tune.cost import estimate, kernels_of, order_of
from prism.tune.profile import random_inputs
from prism.tune.report import Report
from prism.tune.tuner import _swept

K, N = 2048, 5632
LINEAR = ((K, 1), (1, K))
"""X [1, K] row-major and a Linear's weight [N, K] read as W [K, N]: K contiguous."""


def _projection(block_k: int, block_n: int) -> KernelGraph:
    g = KernelGraph()
    x, w = g.input((1, K), "float16", "X"), g.input((K, N), "float16", "W")
    b = BlockGraph(grid=(N // block_n,), loop=K // block_k, launch=Launch(gemv=True))
    b.output(b.accum(b.matmul(b.input(x, imap={}, fmap=1), b.input(w, imap={"x": 1}, fmap=0))), omap={"x": 1})
    g.output(*g.custom(b, [x, w]))
    return g


def test_a_layout_is_its_dims_from_the_contiguous_one_out():
    assert order_of((K, 1)) == (1, 0) and order_of((1, K)) == (0, 1)
    assert order_of((4, 4, 1)) == (2, 1, 0) and order_of((1, 1)) == (1, 0)   # a tie: as row-major


def test_a_narrow_tile_of_a_transposed_weight_reads_whole_sectors_along_k():
    """A [256, 8] tile of W: row-major, 256 runs of 8 halves (16 B, a 32 B sector each); in a Linear's layout,
    8 runs of 256 halves (512 B). The model charges the first twice the bytes, the second what it reads."""
    g = _projection(256, 8)
    row_major, linear = (kernels_of(g, strides=s)[0] for s in (None, LINEAR))
    x = 8 * 256 * 2                          # X's [1, 256] tile over 8 iterations, the same in both
    assert linear.read_bytes - x == 8 * 256 * 8 * 2 and row_major.read_bytes - x == 2 * (linear.read_bytes - x)
    assert estimate(g, strides=LINEAR).seconds < estimate(g).seconds


def test_the_tuner_compiles_and_times_inputs_in_their_layout():
    x, w = random_inputs(_projection(256, 8), seed=0, strides=LINEAR)
    assert x.stride() == LINEAR[0] and w.stride() == LINEAR[1]
    assert torch.equal(w, random_inputs(_projection(256, 8), seed=0)[1])   # the same values, laid out so


def test_ahead_of_time_compiles_specialize_on_the_inputs_strides():
    """CompiledGraph.aot(strides=...): the weight's stride of 1 becomes a constant, as a launch makes it, and its
    tile is then loaded in 16-byte vectors."""
    cg = prism.codegen.compile_graph(_projection(256, 8))
    (plain,), (laid,) = cg.aot(), cg.aot(strides=LINEAR)
    assert ".v4.b32" not in plain.ptx and ".v4.b32" in laid.ptx


def test_strides_are_checked_and_key_the_result_cache(tmp_path):
    g = prism.workloads.get("rmsnorm_linear").build({"n": 1, "d": 64, "o": 96})
    with pytest.raises(InputError, match="one stride per dim"):
        prism.superoptimize(g, strides=((64, 1),), cache=False, compile=False)
    with pytest.raises(InputError, match="strides must be"):
        TuneOptions.of({"strides": ((64, -1),)})
    from prism.runtime.cache import cache_key

    a, _ = cache_key("p", [(1, 64)], ["float16"], "h100", "v")
    b, fields = cache_key("p", [(1, 64)], ["float16"], "h100", "v", strides=((64, 1),))
    assert a != b and fields["strides"] == [[64, 1]]


def test_a_small_space_is_swept_on_a_gpu_only():
    opts = TuneOptions(budget=8)
    report = Report("profile", "h100")
    assert _swept(SWEEP + 1, True, opts, 4, report) == (8, opts.explore, 4) and not report.notes
    assert _swept(SWEEP, False, opts, 0, report) == (8, opts.explore, 0) and not report.notes
    assert _swept(120, True, opts, 4, report) == (120, 0.0, 0)
    assert report.notes == [f"a space of 120 points (at most sweep={SWEEP}): every point compiled and timed"]
    assert _swept(120, True, TuneOptions(budget=8, sweep=0), 4, report)[0] == 8
