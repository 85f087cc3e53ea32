"""Every kind of bad input ends in a prism.errors exception whose message says what is wrong."""

import pytest
import torch

import prism
from prism import interp
from prism.errors import DTypeError, GraphError, InputError, MappingError, PrismError, ShapeError
from prism.ir import TType


def _graph():
    g = prism.KernelGraph()
    return g, g.input((8, 64), name="X"), g.input((64, 32), name="W")


def test_matmul_inner_dims_mismatch():
    g, x, w = _graph()
    with pytest.raises(ShapeError, match=r"matmul: inner dims differ: float16\[64, 32\] has 32 columns, float16\[64, 32\] has 64 rows \(operands W: .*, W: "):
        g.matmul(w, w)


def test_matmul_batch_and_rank_mismatch():
    g = prism.KernelGraph()
    a, b = g.input((2, 4, 8)), g.input((3, 8, 4))
    with pytest.raises(ShapeError, match="batch dims"):
        g.matmul(a, b)
    with pytest.raises(ShapeError, match="same rank"):
        g.matmul(a, g.input((8, 4)))


def test_broadcast_of_incompatible_shapes():
    g, x, w = _graph()
    with pytest.raises(ShapeError, match=r"add: cannot broadcast float16\[8, 64\] with float16\[64, 32\]: dim 0"):
        g.add(x, w)
    with pytest.raises(ShapeError, match="different ranks"):
        g.mul(x, g.input((64,)))


def test_unknown_dtype():
    g = prism.KernelGraph()
    with pytest.raises(DTypeError, match="input A: unknown dtype 'int8'"):
        g.input((4, 4), dtype="int8", name="A")


def test_operands_with_different_dtypes():
    g = prism.KernelGraph()
    with pytest.raises(DTypeError, match="different dtypes"):
        g.add(g.input((2, 2), "float16"), g.input((2, 2), "float32"))


def test_bad_attributes_and_unknown_op():
    g, x, w = _graph()
    with pytest.raises(ShapeError, match="sum: dim 2 is out of range"):
        g.sum(x, 2)
    for size in (3, 0, 2.0, True):
        with pytest.raises(ShapeError, match=f"group_sum: size {size!r} must be a positive int dividing the extent"):
            g.group_sum(x, 1, size)
    with pytest.raises(ShapeError, match=r"group_scale: the scales .* one value per group of 2 along dim 1"):
        g.group_scale(x, x, 1, 2)
    with pytest.raises(ShapeError, match="group_max: size 3 must be a positive int dividing the extent"):
        g.group_max(x, 1, 3)
    with pytest.raises(GraphError, match="rms_norm: eps must be >= 0"):
        g.rms_norm(x, -1.0)
    with pytest.raises(GraphError, match="mul_scalar: value must be a finite number"):
        g.mul_scalar(x, float("nan"))
    with pytest.raises(GraphError, match="unknown op 'softmax'"):
        g.apply("softmax", [x])


def test_imap_names_a_data_dim_the_tensor_lacks():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(4,), loop=1)
    with pytest.raises(MappingError, match=r"imap\['x'\]: data dim 2 does not exist in a tensor of rank 2"):
        b.input(x, imap={"x": 2})


def test_imap_names_a_grid_dim_the_block_graph_lacks():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(4,), loop=1)
    with pytest.raises(MappingError, match=r"names grid dim 'y'.*grid dims x \(grid \(4,\)\)"):
        b.input(x, imap={"y": 0})


def test_grid_size_that_does_not_divide_the_dim():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(3,), loop=1)
    with pytest.raises(MappingError, match="dim 0 of size 8 cannot be split into 3 equal tiles"):
        b.input(x, imap={"x": 0})


def test_loop_size_that_does_not_divide_the_dim():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(4,), loop=5)
    with pytest.raises(MappingError, match="dim 1 of size 64 cannot be split into 5 equal tiles"):
        b.input(x, fmap=1)
    b2 = prism.BlockGraph(grid=(4,), loop=32)   # 4 blocks x 32 iterations = 128 tiles > 64 columns
    with pytest.raises(MappingError, match="dim 1 of size 64 cannot be split into 128 equal tiles"):
        b2.input(x, imap={"x": 1}, fmap=1)


def test_two_grid_dims_splitting_one_data_dim():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(2, 2), loop=1)
    with pytest.raises(MappingError, match=r"splits data dim 1 by two grid dims \('x' and 'y'\)"):
        b.input(x, imap={"x": 1, "y": 1})
    t = b.accum(b.input(x))
    with pytest.raises(MappingError, match="omap splits data dim 0 by two grid dims"):
        b.output(t, omap={"x": 0, "y": 0})


def test_output_saved_before_the_loop_accumulator():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(1,), loop=2)
    t = b.exp(b.input(x, fmap=1))
    with pytest.raises(GraphError, match="output: t1 is computed inside the loop.*after a loop accumulator"):
        b.output(t)


def test_ops_mixing_both_sides_of_the_loop():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(1,), loop=1)
    t = b.input(x, fmap=1)
    s = b.accum(t)
    with pytest.raises(GraphError, match=r"add: operands t0 \(inside the loop\), t1 \(after it\)"):
        b.add(t, s)
    with pytest.raises(GraphError, match="accum: t1 is already after the loop"):
        b.accum(s)


def test_bad_grid_and_loop():
    with pytest.raises(MappingError, match="grid must be 1 to 3 positive ints"):
        prism.BlockGraph(grid=(2, 2, 2, 2))
    with pytest.raises(MappingError, match="grid must be 1 to 3 positive ints"):
        prism.BlockGraph(grid=(0,))
    with pytest.raises(MappingError, match="loop must be a positive int"):
        prism.BlockGraph(grid=(1,), loop=0)


def test_graph_with_no_output():
    g, x, w = _graph()
    g.matmul(x, w)
    with pytest.raises(GraphError, match="has no output"):
        interp.run(g, [torch.ones(8, 64), torch.ones(64, 32)])
    b = prism.BlockGraph(grid=(1,), loop=1)
    b.input(x)
    with pytest.raises(GraphError, match="saves no output"):
        g.custom(b, [x])


def test_tensor_from_another_graph():
    g, x, w = _graph()
    h = prism.KernelGraph()
    with pytest.raises(GraphError, match="exp: tensor X belongs to another graph"):
        h.exp(x)
    with pytest.raises(GraphError, match="output: tensor X belongs to another graph"):
        h.output(x)
    b = prism.BlockGraph(grid=(1,), loop=1)
    t = b.input(x)
    with pytest.raises(GraphError, match="belongs to another graph"):
        g.exp(t)


def test_custom_op_inputs_must_match_the_block_graph():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(1,), loop=1)
    b.output(b.accum(b.input(x)))
    with pytest.raises(GraphError, match="loads 1 input"):
        g.custom(b, [x, w])
    with pytest.raises(ShapeError, match=r"input 0 \(W: float16\[64, 32\]\) should have shape \[8, 64\]"):
        g.custom(b, [w])
    with pytest.raises(DTypeError, match="should have dtype float16"):
        g.custom(b, [g.input((8, 64), dtype="float32")])


def test_block_graph_is_frozen_once_used():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(1,), loop=1)
    t = b.accum(b.input(TType((8, 64), "float16")))
    b.output(t)
    g.custom(b, [x])
    with pytest.raises(GraphError, match="can no longer change"):
        b.output(b.exp(t))


def test_interp_wrong_number_of_inputs():
    g, x, w = _graph()
    g.output(g.matmul(x, w))
    with pytest.raises(InputError, match=r"has 2 input\(s\) \(X, W\), got 1"):
        interp.run(g, [torch.ones(8, 64)])
    with pytest.raises(InputError, match="got a single tensor"):
        interp.run(g, torch.ones(8, 64))


def test_interp_wrong_shape_and_dtype():
    g, x, w = _graph()
    g.output(g.matmul(x, w))
    with pytest.raises(InputError, match=r"input W should have shape \[64, 32\], got \[32, 64\]"):
        interp.run(g, [torch.ones(8, 64), torch.ones(32, 64)])
    with pytest.raises(InputError, match="input X is declared float16, got torch.int64"):
        interp.run(g, [torch.ones(8, 64, dtype=torch.long), torch.ones(64, 32)])
    with pytest.raises(InputError, match="input X is declared float16, got torch.bfloat16"):
        interp.run(g, [torch.ones(8, 64, dtype=torch.bfloat16), torch.ones(64, 32)])
    with pytest.raises(InputError, match="must be a torch.Tensor"):
        interp.run(g, [[1.0], torch.ones(64, 32)])
    with pytest.raises(InputError, match="dtype must be torch.float32 or torch.float64"):
        interp.run(g, [torch.ones(8, 64), torch.ones(64, 32)], dtype=torch.float16)


def test_bad_input_declarations():
    g = prism.KernelGraph()
    with pytest.raises(ShapeError, match="shape must be a non-empty sequence of positive ints"):
        g.input((4, 0))
    with pytest.raises(ShapeError, match="shape must be a sequence"):
        g.input(4)
    g.input((2,), name="A")
    with pytest.raises(GraphError, match="a tensor named 'A' already exists"):
        g.input((2,), name="A")


def test_every_error_is_a_prism_error():
    for exc in (DTypeError, GraphError, InputError, MappingError, ShapeError):
        assert issubclass(exc, PrismError)


def test_saved_output_is_not_a_tile():
    g, x, w = _graph()
    b = prism.BlockGraph(grid=(1,), loop=1)
    o = b.output(b.accum(b.input(x)))
    with pytest.raises(GraphError, match="exp: t2 is a saved output"):
        b.exp(o)
    with pytest.raises(GraphError, match="output: t2 is a saved output"):
        b.output(o)


def test_block_input_types_are_checked_and_normalized():
    b = prism.BlockGraph(grid=(1,), loop=1)
    with pytest.raises(ShapeError, match="shape must be a non-empty sequence of positive ints"):
        b.input(TType((0, -3), "float16"))
    t = b.input(TType((4, 4), torch.float16))
    assert t.dtype == "float16" and b.input_types[0].dtype == "float16"


def test_input_names_reserved_for_computed_tensors():
    with pytest.raises(GraphError, match="name 't1' is reserved"):
        prism.KernelGraph().input((2,), name="t1")
