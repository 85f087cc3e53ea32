"""Outputs written once along a grid dim (BlockGraph.output's `once`): what the verifier proves of them, what
the reference executor runs, and when the search's mappings choose them (MappingProblem.once).

The form they exist for is rms_norm(X) @ W with K split across blocks: sum(X²) is summed over the K blocks
like X @ W, but every block along W's columns computes the same sum, so only the first of them adds it in."""

import pytest
import torch

from prism import interp, search, verify, workloads
from prism.errors import MappingError
from prism.ir import BlockGraph, KernelGraph
from prism.workloads.base import EPS

N, D = 4, 64


def split_k_norm(once: tuple[str, ...] = ("x",), matmul_once: tuple[str, ...] = ()) -> KernelGraph:
    """rms_norm(X) @ W: grid x over W's columns, y over K (and a loop within); sum(X²) written once along x."""
    g = KernelGraph()
    x, w = g.input((N, D), "float16", "X"), g.input((D, D), "float16", "W")
    b = BlockGraph(grid=(2, 2), loop=2)
    bx = b.input(x, imap={"y": 1}, fmap=1)
    bw = b.input(w, imap={"x": 1, "y": 0}, fmap=0)
    b.output(b.accum(b.matmul(bx, bw)), omap={"x": 1}, once=matmul_once)
    b.output(b.accum(b.sum(b.square(bx), 1)), omap={}, once=once)
    p, ss = g.custom(b, [x, w])
    g.output(g.div(p, g.sqrt(g.add_scalar(g.mul_scalar(ss, 1 / D), EPS))))
    return g


def program() -> KernelGraph:
    return workloads.get("rmsnorm").build({"n": N, "d": D})


def test_an_output_written_once_where_its_blocks_agree_is_proved_and_runs_right():
    g = split_k_norm()
    assert verify.equivalent(program(), g).equal
    assert verify.random_test(program(), g).equal
    x, w = torch.randn(N, D, dtype=torch.float64), torch.randn(D, D, dtype=torch.float64) / 8
    want = x / torch.sqrt(x.square().mean(-1, keepdim=True) + EPS) @ w
    (got,) = interp.run(g, [x, w], torch.float64)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("once, matmul_once", [((), ()), (("x",), ("y",))])
def test_summing_copies_or_writing_once_where_blocks_differ_is_rejected(once, matmul_once):
    """Summing the copies of sum(X²) over x counts it twice; X @ W written once along y keeps only the first K
    block's share. Neither is proved, and both are numerically wrong."""
    g = split_k_norm(once, matmul_once)
    assert not verify.equivalent(program(), g).equal
    assert not verify.random_test(program(), g).equal


def test_once_names_grid_dims_the_output_does_not_place():
    b = BlockGraph(grid=(2, 2), loop=1)
    t = b.input(KernelGraph().input((4, 8), "float16", "X"), imap={"x": 1})
    with pytest.raises(MappingError, match="once"):
        b.output(b.accum(t), omap={"x": 1}, once=("x",))
    with pytest.raises(MappingError, match="once"):
        b.output(b.accum(t), omap={"x": 1}, once=("z",))


def test_the_search_writes_once_exactly_where_no_loader_of_the_output_is_split():
    """In every verified rmsnorm sGraph, an output is written once along a grid dim just when that dim maps none
    of the output's dims and none of the loaders it is computed from; some sGraphs have such an output, among
    them the split-K form: a grid dim over d sums X @ W and sum(X²)/d, written once along W's columns, and
    kernel-level ops finish the norm (prism.search.generator.default_kernel_ops)."""
    result = search(program(), workers=1)
    split_k = [sg for sg in result.graphs if sg.form == "fused+split sums" and any(sg.structure.problem().once(
        sg.mapping)) and [op.op for op in sg.structure.kernel_ops] == ["add_scalar", "sqrt", "div"]]
    assert split_k
    seen = 0
    for sg in result.graphs:
        problem = sg.structure.problem()
        loaders, omaps = problem.maps(sg.mapping)
        for k, once in enumerate(problem.once(sg.mapping)):
            for p in "xyz"[:len(sg.mapping.grid)]:
                free = p not in omaps[k] and not any(p in loaders[t][0] for t in problem.cones[k])
                assert (p in once) == free, sg.describe()
            seen += bool(once)
        g = sg.instantiate(grid=(2,) * sg.mapping.n_grid, loop=2 if sg.mapping.loop else 1)
        assert verify.random_test(program(), g).equal, sg.describe()
    assert seen
