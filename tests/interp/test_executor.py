"""The reference executor's block-by-block semantics, checked against hand-derived torch expressions, both block by
block and with every block at once (tests/interp/test_all_blocks.py compares the two ways on many more kernels)."""

import pytest
import torch

import prism
from prism import interp
from prism.interp import executor


@pytest.fixture(autouse=True, params=["all blocks at once", "block by block"])
def way(request, monkeypatch):
    """Every test here runs both ways: `run` takes all blocks at once wherever the splits are even."""
    if request.param == "block by block":
        monkeypatch.setattr(executor, "_even", lambda block: False)
    return request.param


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _kernel(block, *types):
    """A kernel graph applying `block` to fresh inputs of `types` (shape tuples)."""
    g = prism.KernelGraph()
    ins = [g.input(s, dtype="float32") for s in types]
    g.output(*g.custom(block, ins))
    return g


def _tt(*shape):
    return prism.ir.TType(shape, "float32")


def test_grid_and_loop_split_one_dim_block_stride_is_tile_times_loop():
    # block x takes columns [8x, 8x+8); iteration i takes the i-th pair of those; accum sums the pairs
    b = prism.BlockGraph(grid=(2,), loop=4)
    t = b.input(_tt(4, 16), imap={"x": 1}, fmap=1)
    assert t.shape == (4, 2)
    b.output(b.accum(t), omap={"x": 1})
    x = _rand(4, 16)
    (got,) = interp.run(_kernel(b, (4, 16)), [x], torch.float64)
    want = torch.cat([sum(x[:, 8 * blk + 2 * i: 8 * blk + 2 * i + 2] for i in range(4)) for blk in range(2)], 1)
    torch.testing.assert_close(got, want)


def test_unmapped_grid_dim_sums_blocks_split_k():
    b = prism.BlockGraph(grid=(4, 2), loop=2)   # x splits k across blocks, y splits columns
    a = b.input(_tt(3, 16), imap={"x": 1}, fmap=1)
    w = b.input(_tt(16, 6), imap={"x": 0, "y": 1}, fmap=0)
    b.output(b.accum(b.matmul(a, w)), omap={"y": 1})
    x, y = _rand(3, 16), _rand(16, 6, seed=1)
    (got,) = interp.run(_kernel(b, (3, 16), (16, 6)), [x, y], torch.float64)
    torch.testing.assert_close(got, x @ y)


def test_replicated_input_summed_over_blocks_and_loop_is_scaled():
    # red(repl(t)) is size * t, not t: the executor must not hide this
    b = prism.BlockGraph(grid=(3,), loop=2)
    t = b.input(_tt(2, 5))
    b.output(b.accum(t))
    x = _rand(2, 5)
    (got,) = interp.run(_kernel(b, (2, 5)), [x], torch.float64)
    torch.testing.assert_close(got, 6 * x)


def test_three_grid_dims_and_two_outputs():
    b = prism.BlockGraph(grid=(2, 2, 2), loop=1)
    t = b.input(_tt(4, 6, 8), imap={"x": 0, "y": 2, "z": 1})
    s = b.accum(b.exp(t))
    b.output(s, omap={"x": 0, "y": 2, "z": 1})
    b.output(b.sum(s, 2), omap={"x": 0, "z": 1})   # y unmapped: the per-block row sums add up
    x = _rand(4, 6, 8)
    e, rowsum = interp.run(_kernel(b, (4, 6, 8)), [x], torch.float64)
    torch.testing.assert_close(e, x.exp())
    torch.testing.assert_close(rowsum, x.exp().sum(2, keepdim=True))


def test_kernel_ops_between_custom_ops():
    b1 = prism.BlockGraph(grid=(2,), loop=1)
    b1.output(b1.accum(b1.square(b1.input(_tt(4, 6), imap={"x": 0}))), omap={"x": 0})
    b2 = prism.BlockGraph(grid=(3,), loop=2)
    b2.output(b2.accum(b2.input(_tt(4, 6), imap={"x": 1}, fmap=0)), omap={"x": 1})
    g = prism.KernelGraph()
    x = g.input((4, 6), dtype="float32")
    (sq,) = g.custom(b1, [x])
    (colsum,) = g.custom(b2, [g.neg(sq)])   # loop over rows of 4: tile [2, 2], summed over 2 iterations
    g.output(colsum, sq)
    v = _rand(4, 6)
    got, got_sq = interp.run(g, [v], torch.float64)
    torch.testing.assert_close(got_sq, v * v)
    torch.testing.assert_close(got, -(v * v)[:2] - (v * v)[2:])


def test_post_loop_ops_run_once_per_block():
    b = prism.BlockGraph(grid=(2,), loop=3)
    t = b.input(_tt(2, 12), imap={"x": 1}, fmap=1)
    s = b.accum(b.sum(t, 1))
    b.output(b.sqrt(b.mul_scalar(b.square(s), 4.0)), omap={"x": 1})
    x = _rand(2, 12)
    (got,) = interp.run(_kernel(b, (2, 12)), [x], torch.float64)
    want = torch.cat([x[:, :6].sum(1, keepdim=True), x[:, 6:].sum(1, keepdim=True)], 1).abs() * 2
    torch.testing.assert_close(got, want)


def test_float16_inputs_are_computed_in_the_requested_precision():
    g = prism.KernelGraph()
    x = g.input((2, 3))
    g.output(g.mul_scalar(x, 3.0))
    v = _rand(2, 3).half()
    (got,) = interp.run(g, [v])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, v.float() * 3)


def test_program_fn_computes_what_run_computes_without_its_checks():
    """The straight-line form a compiled model's custom op calls: float32 inside, outputs in their dtypes."""
    g = prism.workloads.get("rmsnorm").build({"n": 4, "d": 64})           # float16 inputs and output
    x, w = (t.half() for t in (_rand(4, 64), _rand(64, 64, seed=1) / 8))
    (got,) = interp.program_fn(g)([x, w])
    (want,) = interp.run(g, [x, w])
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, want.half())


def test_program_fn_takes_programs_only():
    b = prism.BlockGraph(grid=(2,))
    b.output(b.accum(b.input(_tt(4, 16), imap={"x": 1})), omap={"x": 1})
    with pytest.raises(prism.errors.InputError, match="kernel-level ops"):
        interp.program_fn(_kernel(b, (4, 16)))


def test_a_ragged_split_is_run_block_by_block():
    """40 rows in three blocks of 16-row tiles: the last block's tile is 8 rows, so the blocks' tiles differ in shape
    and `run` takes them one at a time; all at once, the uneven tiles do not fit one view."""
    b = prism.BlockGraph(grid=(3,), loop=1)
    t = b.input(_tt(40, 4), imap={"x": 0})
    assert t.shape == (16, 4)
    b.output(b.accum(b.exp(t)), omap={"x": 0}, shape=(40, 4))
    assert not executor._even(b)
    x = _rand(40, 4)
    (got,) = interp.run(_kernel(b, (40, 4)), [x], torch.float64)
    torch.testing.assert_close(got, torch.exp(x))
    with pytest.raises(RuntimeError):
        interp.run_block(b, [x], together=True)
