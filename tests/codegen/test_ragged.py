"""Masked tail tiles: a dim of extent E split into ceil(E / t) tiles of a power of two t, the last partial.

Under the interpreter (tests/codegen/ragged_cases.py, run by conftest.py's runner beside test_interpret.py's
cases): every workload at odd sizes against the reference executor and torch (attention at kv = 1, 37, 513,
1000, head dim 96, float16 logits of standard deviation 30), and mutants of the masking rules that must
fail. Kernels that take sizes at launch (RUNTIME), each generated once and run at many sizes, and mutants that
count those sizes wrong. In this process: the split rule, the tuner's space at odd sizes, the cost model's padded
work, what code generation refuses, and the sm_90 compile of ragged kernels and of kernels with runtime sizes."""

from __future__ import annotations

import math

import pytest
import torch

import prism
from prism import codegen, interp
from prism.codegen import CodegenError
from prism.codegen.layout import Layout
from prism.codegen.plan import plan_graph
from prism.errors import InputError, MappingError
from prism.ir import BlockGraph, KernelGraph
from prism.ir.block import split
from prism.tune.cost import estimate, kernels_of
from prism.tune.space import Candidate, Space
from prism.tune.target import H100
from tests.codegen.ragged_cases import MUTANTS, RAGGED, RUNTIME


@pytest.mark.parametrize("extent, parts, tile", [
    (1000, 1, 1000), (1000, 8, 125), (1000, 16, 64), (513, 9, 57), (513, 5, 128), (37, 3, 16), (5, 2, 4),
    (8, 3, None), (64, 5, None), (64, 128, None), (4097, 132, None)])
def test_a_split_is_equal_tiles_or_power_of_two_tiles_with_a_partial_last(extent, parts, tile):
    assert split(extent, parts) == tile


@pytest.mark.parametrize("extent, blocks, loop, tile", [
    (4097, 4, 33, 32),    # 129 tiles of 32 in 4 blocks of 33: the last block's 30 real, then 3 past the extent
    (129, 4, 5, 8), (4097, 3, 43, 32),
    (33, 4, 8, None),     # 17 tiles of 2 in 4 blocks of 8: the last block would hold none
    (9, 1, 4, None),      # 3 tiles of 4 in one block of 4 iterations: one more than it needs
    (4097, 2, 100, None), # 65 tiles of 64 in 2 blocks of 100 iterations: 35 past the extent
    (64, 3, 1, None)])    # blocks alone: every tile is real, or there is no split
def test_where_the_loop_walks_a_dim_the_last_blocks_later_tiles_may_lie_past_its_extent(extent, blocks, loop, tile):
    assert split(extent, blocks * loop, loop) == tile


def test_a_block_with_no_tile_of_the_extent_would_make_partials_of_nothing(monkeypatch):
    """Why a split keeps a real tile in every block: split-KV attention at kv 33 in 4 blocks of 8 tiles of 2 (17
    real) leaves the last block none, and its online softmax's running max over nothing is -inf, exp(-inf - -inf)
    NaN in its partials, which the combine carries to the output. With the rule there is no such point; with
    the rule dropped (patched here) the executor, which computes what the kernels do, gives NaN."""
    import prism.ir.block as block_module

    w = prism.workloads.get("attention")
    cfg = {"b": 2, "g": 4, "h": 33, "d": 64}
    with pytest.raises(MappingError, match="every block holding some"):
        w.fused(cfg, online=True, splits=4, loop=8, partials=True)
    monkeypatch.setattr(block_module, "split", lambda e, parts, loop=1: e // parts if e % parts == 0
                        else block_module.next_pow2(-(-e // parts)))
    g = w.fused(cfg, online=True, splits=4, loop=8, partials=True)
    (out,) = interp.run(g, w.inputs(cfg, 0, torch.float32))
    assert not torch.isfinite(out).all()


def test_the_model_prices_tiles_past_the_extent_as_their_neighbours():
    """Split-KV attention at kv 4097 = 128·32 + 1 in 4 blocks of 33 tiles of 32 (3 past the extent) costs, in the
    model, what 4 blocks of 32 tiles cost at 4096 but for the 33rd iteration; without such tiles 4097 took 3
    blocks of 43 (fewer blocks than the H100 has SMs: 96 at 32 rows) at a dearer estimate."""
    w = prism.workloads.get("attention")
    cfg = {"b": 32, "g": 1, "d": 128}

    def us(h: int, splits: int, loop: int) -> float:
        return estimate(w.fused({**cfg, "h": h}, online=True, splits=splits, loop=loop, partials=True), H100).seconds

    past = us(4097, 4, 33)
    assert past <= us(4096, 4, 32) * 33 / 32 * 1.01
    assert past < us(4097, 3, 43)


def _past(block: BlockGraph) -> bool:
    """Some loader's dim has fewer tiles of its extent than the blocks and iterations that split it."""
    for i in block.loaders:
        a = block.nodes[i].attrs
        for d, (tile, size) in enumerate(zip(block.nodes[i].outputs[0].shape, block.input_types[a["index"]].shape)):
            parts = math.prod(block.grid_size(g) for g, dd in a["imap"].items() if dd == d)
            if -(-size // tile) < parts * (block.loop if a["fmap"] == d else 1):
                return True
    return False


def test_the_space_offers_tiles_past_the_extent_and_they_compute_the_program(searched):
    """At kv 129 the split-KV µGraphs have points whose last block walks tiles past the extent; they instantiate,
    generate, and the executor computes the program on them."""
    w, _, result = searched("attention")
    cfg = {"b": 2, "g": 4, "h": 129, "d": 64}
    space = Space(result, w.build(cfg))
    past = []
    for gs in space.graphs:
        for grid, loop in gs.tilings():
            if len(past) == 4:
                break
            try:
                g = space.instantiate(Candidate(gs.index, grid, loop))
            except MappingError:   # a group mapping whose unsplit tile holds no whole groups: the tuner skips it
                continue
            if _past(g.blocks[0]):
                past.append(g)
    assert past, "no point with tiles past the extent"
    xs = w.inputs(cfg, 0, torch.float32)
    want = w.reference(*[x.double() for x in xs])
    for g in past:
        assert codegen.compile_graph(g).source
        (got,) = interp.run(g, xs)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_a_ragged_output_states_its_shape():
    g = KernelGraph()
    x = g.input((5, 1000), "float16", "X")
    b = BlockGraph(grid=(16,))
    t = b.accum(b.input(x, imap={"x": 1}))                    # tiles [5, 64], the last holds 40 columns
    with pytest.raises(MappingError, match="does not split into its tiles"):
        b.output(t, omap={"x": 1}, shape=(5, 900))           # 16 tiles of 64 hold 961 to 1024 elements
    assert b.output(t, omap={"x": 1}, shape=(5, 1000)).shape == (5, 1000)


@pytest.mark.parametrize("case", [c for c in RAGGED if c != "ragged_attention_kv1"])   # kv = 1: one tile of one
def test_each_case_is_ragged(case):
    assert any(_ragged(b) for b in RAGGED[case]().graph.blocks), f"{case}: every split is even"


@pytest.mark.parametrize("case", list(RAGGED))
def test_ragged_kernels_match_the_executor_and_torch(case, interp_results):
    result = interp_results.get(case)
    assert result is not None, f"the runner did not report {case}"
    assert result["ok"], f"{case} failed under the interpreter:\n{result['error']}"


@pytest.mark.parametrize("case", list(RUNTIME))
def test_kernels_with_runtime_sizes_run_right_at_every_size(case, interp_results):
    """One generated module, run at every size of the case (more and fewer tiles than it was generated at, one
    element, a whole tile and one past it) against the reference executor and torch."""
    result = interp_results.get(case)
    assert result is not None, f"the runner did not report {case}"
    assert result["ok"], f"{case} failed under the interpreter:\n{result['error']}"
    assert result["sizes"] == 1 + len(RUNTIME[case]().others)


@pytest.mark.parametrize("case", list(MUTANTS))
def test_mutants_of_the_masking_rules_are_caught(case, interp_results):
    """A 0 pad before a max, a store without its mask, a mask of the lane instead of the global index, a runtime
    extent one short, trip counts or grid blocks rounded down: each gives wrong numbers or writes out of bounds
    (not an error of the mutation itself)."""
    result = interp_results.get(case)
    assert result is not None, f"the runner did not report {case}"
    assert not result["ok"], f"{case} was not caught"
    assert "AssertionError" in result["error"], result["error"]


def _ragged(block: BlockGraph) -> bool:
    return any(size % tile for i in block.loaders
               for tile, size in zip(block.nodes[i].outputs[0].shape, block.input_types[block.nodes[i].attrs["index"]].shape))


@pytest.mark.parametrize("name, cfg", [("rmsnorm", {"n": 5, "d": 1000}),
                                       ("attention", {"b": 2, "g": 4, "h": 1000, "d": 64})])
def test_the_space_admits_ragged_tilings_that_compute_the_program(searched, name, cfg):
    """At odd sizes the space has points whose last tile is partial; they instantiate, code generation lays
    them out as the space pads them and generates them (a loop dim kept across iterations is split evenly),
    and the executor computes the program on them."""
    w, _, result = searched(name)
    space = Space(result, w.build(cfg))
    ragged = [c for c in space.sample(60, seed=1) if _ragged(space.instantiate(c).blocks[0])]
    assert ragged, "no ragged point at odd sizes"
    xs = w.inputs(cfg, 0, torch.float32)
    want = w.reference(*[x.double() for x in xs])
    for c in ragged[:6]:
        g = space.instantiate(c)
        block, gs = g.blocks[0], space.graphs[c.graph]
        layout = Layout(block, [f"in{k}" for k in range(len(block.input_types))])
        assert all(layout.shape(k) == gs.padded(k, c.grid, c.loop, c.gemv) for k in range(len(gs.ops))), c
        assert codegen.compile_graph(g).source
        (got,) = interp.run(g, xs)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_the_cost_model_charges_the_padded_work():
    """d = 1000 in 16 tiles of 64 costs what d = 1024 does: the kernel computes on every lane of the last tile."""
    w = prism.workloads.get("rmsnorm")
    odd, even = (kernels_of(w.fused({"n": 5, "d": d}, grid=16, loop=16)) for d in (1000, 1024))
    assert odd == even


def test_a_ragged_loop_dim_kept_across_iterations_is_refused():
    """Accumulating X's loop tiles and summing them after the loop is the row sum, and the executor says so
    even when the last tile is partial; but the kernel's accumulator would mix the last tile's padded lanes
    into lanes that are real in the other iterations, so code generation refuses it (and the space never
    offers it: its classes kept across the loop split evenly)."""
    g = KernelGraph()
    x = g.input((4, 40), "float32", "X")
    b = BlockGraph(loop=3)                                    # tiles of 16: 16 + 16 + 8
    b.output(b.sum(b.accum(b.input(x, fmap=1)), 1))
    g.output(*g.custom(b, [x]))
    xs = torch.rand(4, 40)
    torch.testing.assert_close(interp.run(g, [xs])[0], xs.sum(1, keepdim=True))
    with pytest.raises(CodegenError, match="carried across the loop.*partial last tile"):
        codegen.compile_graph(g)


@pytest.mark.parametrize("case", ["ragged_rmsnorm", "ragged_attention_kv1000", "ragged_attention_split_kv1000",
                                  "ragged_moe"])
def test_ragged_kernels_compile_for_sm90(case):
    results = codegen.compile_graph(RAGGED[case]().graph).aot()
    assert results and all(".target sm_90" in r.ptx for r in results)


@pytest.mark.parametrize("case", list(RUNTIME))
def test_kernels_with_runtime_sizes_compile_once_for_sm90(case):
    """Their extents and trip counts are i32 arguments that Triton does not specialize (neither are the strides
    before them), so one sm_90 compile serves every size; the bound launch gets them counted at each size."""
    c = RUNTIME[case]()
    plan = plan_graph(c.graph, sizes=c.sizes)
    cg = codegen.CompiledGraph(c.graph, plan)
    (spec,) = plan.kernels
    runtime = [n for n, _ in spec.runtime]
    assert runtime and all(spec.signature[n] == "i32" and n not in spec.constexprs for n in runtime)
    assert f"do_not_specialize={[*runtime]!r}"[:-1] in plan.source   # the runtime arguments first
    (aot,) = cg.aot()
    assert ".target sm_90" in aot.ptx
    for other in c.others:
        sized = plan.at({n: other.graph.inputs[i].shape[d] for (i, d), n in c.sizes.items()})
        assert sized.source is plan.source and sized.kernels == plan.kernels
        shapes = [sized.buffers[j].shape for j in sized.steps[0].inputs + sized.steps[0].outputs]
        assert spec.grid_at(shapes) == other.graph.blocks[0].grid      # as many blocks as its µGraph has
        if "LOOP" in runtime:
            assert spec.runtime_at(shapes)[runtime.index("LOOP")] == other.graph.blocks[0].loop


def _split_kv(**params) -> tuple[KernelGraph, dict]:
    """Attention with kv split across blocks (split-KV), kv taken at launch."""
    w = prism.workloads.get("attention")
    return w.fused({"b": 2, "g": 4, "h": 1000, "d": 64}, **params), {(1, 2): "kv", (2, 1): "kv"}


def _two_classes_one_loop() -> tuple[KernelGraph, dict]:
    """The loop walks X's dim 1 (runtime size n) and Y's dim 0 (fixed): one trip count cannot serve both."""
    g = KernelGraph()
    x, y = g.input((4, 64), "float32", "X"), g.input((32, 4), "float32", "Y")
    b = BlockGraph(loop=2)
    sx = b.accum(b.sum(b.input(x, fmap=1), 1))
    sy = b.accum(b.sum(b.input(y, fmap=0), 0))
    b.output(sx), b.output(sy)
    g.output(*g.custom(b, [x, y]))
    return g, {(0, 1): "n"}


def _group_sum() -> tuple[KernelGraph, dict]:
    g = KernelGraph()
    x = g.input((4, 64), "float32", "X")
    b = BlockGraph()
    b.output(b.accum(b.apply("group_sum", [b.input(x)], {"dim": 1, "size": 16})))
    g.output(*g.custom(b, [x]))
    return g, {(0, 1): "n"}


@pytest.mark.parametrize("make, message", [
    (lambda: _split_kv(online=True, splits=4, loop=4, partials=True), "split by . and the loop"),
    (lambda: _split_kv(online=True, splits=4, loop=1, partials=True),       # partials side by side along y
     "grid dim . splits a dim of runtime size and other dims"),
    (lambda: _split_kv(splits=2), "sums the blocks of grid dim"),           # exp/sum/div: the splits' sums added
    (_two_classes_one_loop, "the loop splits a dim of runtime size and other dims"),
    (_group_sum, "groups a dim of runtime size"),
])
def test_what_cannot_take_its_sizes_at_launch_is_refused(make, message):
    """Splits under which a block or an iteration could hold no real element at a smaller size, counts that would
    not fit every dim they split, and groups counted when generated (prism.codegen.layout)."""
    graph, sizes = make()
    with pytest.raises(CodegenError, match=message):
        plan_graph(graph, sizes=sizes)


def test_a_size_past_a_whole_dims_block_is_refused():
    """A runtime size split by nothing is one block: larger extents need kernels generated for them."""
    c = RUNTIME["runtime_rmsnorm_linear"]()
    plan = plan_graph(c.graph, sizes=c.sizes)                   # n = 5 rows in one block of 16
    assert plan.at({"n": 16, "o": 600}).buffers[0].shape == (16, 1000)
    with pytest.raises(InputError, match="one block of 16; it is 17"):
        plan.at({"n": 17, "o": 600})
    with pytest.raises(InputError, match="take sizes o at launch; no value given"):
        plan.at({"n": 5})
