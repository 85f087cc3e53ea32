"""LoRA's fused µGraph: B's tile is loop-invariant and meets acc(X @ A) after the loop. It builds,
runs in the reference executor, is proven equal to the program, and is costed and compiled with B loaded
once; mutants that split B along the wrong dim are refused, at construction or by the verifier."""

import pytest
import torch

from prism import interp
from prism.errors import GraphError
from prism.ir import BlockGraph, KernelGraph
from prism.ir.kinds import BEFORE, INVARIANT, LOOP, POST
from prism.tune.cost import kernels_of
from prism.verify import equivalent
from prism.workloads.lora import LORA

CFG = {"n": 4, "d": 64, "r": 16, "o": 128}


def _run(graph, cfg):
    inputs = [t.double() for t in LORA.inputs(cfg, 0, "float32")]
    (got,) = interp.run(graph, inputs, torch.float64)
    return got, LORA.reference(*inputs)


@pytest.mark.parametrize("grid, loop", [(1, 1), (2, 2), (4, 4)])
def test_the_fused_lora_graph_runs_and_verifies(grid, loop):
    g = LORA.fused(CFG, grid=grid, loop=loop)
    (block,) = g.blocks
    b_tile, xa, out = 3, 7, 9                              # B's loader, acc(X @ A), the sum saved
    assert block.nodes[b_tile].attrs["fmap"] is None and block.phase((b_tile, 0)) == INVARIANT
    assert block.phase((xa, 0)) == POST and block.phase((out, 0)) == POST
    assert block.schedule().places[b_tile] == BEFORE     # loaded once, not every iteration
    got, want = _run(g, CFG)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    verdict = equivalent(LORA.build(CFG), g)
    assert verdict.equal, verdict.reason


def _lora_with_b(b_imap, b_fmap=None, grid=1):
    """LORA's fused form at CFG with B loaded by other maps (the mutants)."""
    g = KernelGraph()
    x, w, a, bt = (g.input(s, "float16", n) for s, n in [((4, 64), "X"), ((64, 128), "W"), ((64, 16), "A"),
                                                          ((16, 128), "B")])
    k = BlockGraph(grid=(grid,), loop=2)
    bx, bw, ba = k.input(x, fmap=1), k.input(w, imap={"x": 1}, fmap=0), k.input(a, fmap=0)
    bb = k.input(bt, imap=b_imap, fmap=b_fmap)
    xw, xa = k.accum(k.matmul(bx, bw)), k.accum(k.matmul(bx, ba))
    k.output(k.add(xw, k.matmul(xa, bb)), omap={"x": 1})
    g.output(*g.custom(k, [x, w, a, bt]))
    return g


def test_b_split_along_its_rank_dim_is_rejected_by_the_verifier():
    """With one block, splitting B's rank dim by grid dim x changes nothing at this size, so the executor
    agrees; for other grid sizes it would be wrong, and the verifier (for all sizes) says no."""
    mutant = _lora_with_b({"x": 0})
    got, want = _run(mutant, CFG)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not equivalent(LORA.build(CFG), mutant).equal
    assert equivalent(LORA.build(CFG), _lora_with_b({"x": 1})).equal


def test_b_walked_by_the_loop_cannot_meet_the_accumulated_product():
    with pytest.raises(GraphError, match="matmul: operands .*after it.*inside the loop.* different sides"):
        _lora_with_b({}, b_fmap=1)                        # B tile [16, 64], a new one every iteration


def test_the_cost_model_reads_b_once_per_block():
    g = LORA.fused(LORA.configs[0])
    (k,) = kernels_of(g)
    cfg, (block,) = LORA.configs[0], g.blocks
    b_tile = cfg["r"] * cfg["o"] // block.grid[0] * 2    # fp16 bytes of one block's B tile
    x_a_w = (cfg["n"] + cfg["r"] + cfg["o"] // block.grid[0]) * cfg["d"] * 2 // block.loop
    assert k.pre_bytes + k.pre_l2 == b_tile and k.iter_bytes + k.iter_l2 == x_a_w


def test_invariant_values_meet_either_side_of_the_loop():
    """The phase rule (prism.ir.kinds.joined): ops on invariant tiles alone are invariant and run before the
    loop; an invariant meets loop values inside the loop and accumulated values after it; a loop value and
    an accumulated one still never meet, and an invariant tile may be saved as it is."""
    g = KernelGraph()
    x, v = g.input((4, 64), "float16", "X"), g.input((4, 64), "float16", "V")
    k = BlockGraph(grid=(1,), loop=2)
    bx, bv = k.input(x, fmap=1), k.input(v)
    e = k.exp(bv)
    assert k.phase(e.ref) == INVARIANT and k.schedule().places[e.ref[0]] == BEFORE
    s = k.accum(k.sum(k.mul(bx, bx), 1))
    assert k.phase(k.mul(bx, k.sum(bv, 1)).ref) == LOOP and k.phase(k.mul(e, s).ref) == POST
    with pytest.raises(GraphError, match=r"add: operands t0 \(inside the loop\), .* \(after it\)"):
        k.add(bx, s)
    k.output(e)
    assert k.phase(k.accum(bv).ref) == POST


@pytest.fixture(scope="module")
def searched():
    from prism.search import search

    return search(LORA.build(CFG), workers=1, time_limit=300)


def test_the_search_finds_lora_with_b_after_the_loop(searched):
    """The generator lets B's tile meet acc(X @ A) (LoRA multiplies a product straight into another matmul:
    prism.search.generator.chained_contraction); each such graph leaves B to the grid in every mapping and
    computes the program at other sizes too."""
    after = [g for g in searched.graphs if 3 in g.structure.graph.invariant]
    assert after, [searched.describe(i) for i in range(len(searched))]
    cfg = {"n": 8, "d": 128, "r": 16, "o": 64}
    program = LORA.build(cfg)
    for g in after:
        assert g.maps()["loaders"][3][1] is None
        looped = bool(g.mapping.loop)
        concrete = g.instantiate([t.shape for t in program.inputs], grid=(2,) * g.n_grid, loop=2 if looped else 1,
                                 names=LORA.input_names)
        got, want = _run(concrete, cfg)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9)


def test_the_generator_offers_post_loop_tiles_only_where_a_contraction_is_chained():
    import prism.workloads as wl
    from prism.search.generator import chained_contraction
    from prism.symbolic import AtomSpace
    from prism.symbolic.closure import closure
    from prism.symbolic.terms import from_graph
    from tests.configs import small_cfg

    def chained(program):
        (root,) = from_graph(program)
        return chained_contraction(closure(root, AtomSpace(tuple(t.shape for t in program.inputs))))

    assert chained(LORA.build(CFG))
    assert not any(chained(wl.get(n).build(small_cfg(n))) for n in wl.paper_names())
