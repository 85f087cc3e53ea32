"""`prism.superoptimize(program, dynamic=...)`: one DynamicGraph for every size of its dynamic dims, searched
once and tuned once per size bucket (prism.runtime.buckets)."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch

import prism
from prism.errors import InputError
from prism.codegen import CodegenError
from prism.codegen.plan import plan_graph
from prism.runtime.buckets import SizeBuckets, bucket
from prism.tune.cost import estimate
from prism.tune.space import instantiate
from tests.child import interpreted

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU")


def attention(kv: int = 32) -> prism.KernelGraph:
    """softmax(Q Kᵀ / 4) V over `kv` key positions (Kt is K transposed)."""
    g = prism.KernelGraph()
    q, kt, v = g.input((2, 4, 16), "float32", "Q"), g.input((2, 16, kv), "float32", "Kt"), g.input((2, kv, 16),
                                                                                                 "float32", "V")
    s = g.mul_scalar(g.matmul(q, kt), 0.25)
    e = g.exp(g.sub(s, g.max(s, 2)))
    g.output(g.matmul(g.div(e, g.sum(e, 2)), v))
    return g


def dynamic(g: prism.KernelGraph, **kwargs):
    return prism.superoptimize(g, dynamic={"kv": ["Kt.2", "V.1"]}, cache=False, compile=False, budget=2,
                               search_options={"max_grid": 1}, **kwargs)


def inputs(kv: int, gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.randn(2, 4, 16, generator=gen), torch.randn(2, 16, kv, generator=gen) * 3,
            torch.randn(2, kv, 16, generator=gen)]


def test_one_graph_serves_every_kv_length_with_one_tuning_per_bucket(monkeypatch):
    searches = []
    real = prism.runtime.pipeline._search
    monkeypatch.setattr(prism.runtime.pipeline, "_search", lambda *a: searches.append(1) or real(*a))
    dg = dynamic(attention())
    gen = torch.Generator().manual_seed(0)
    sizes = list(range(1, 41)) + [63, 64, 65, 127, 129, 513, 1000, 1100]
    for kv in sizes:
        q, kt, v = inputs(kv, gen)
        (out,) = dg(q, kt, v)   # the chosen µGraph at this size, in the reference executor
        torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    buckets = {bucket([(2, 4, 16), (2, 16, kv), (2, kv, 16)]) for kv in sizes}
    assert set(dg.tunings) == buckets and set(dg.tunings.values()) == {1}
    assert len(searches) == 2   # at kv 1, where the search takes kv as absent, and at kv 2, for every larger size
    assert "reused" in dg.at(*inputs(37, gen)).report.notes[-1]


def test_a_choice_that_is_no_valid_point_at_a_new_size_moves_to_the_models_best_valid_one(monkeypatch):
    """Where a bucket's sizes get kernels of their own (here: as if its kernels could not take kv at launch), a
    choice whose tiles do not fit a new size is served at the model's best point of its sGraph at that size, with
    the model's estimate there, and not tuned again; where its sGraph has no valid point at that size, the size
    is tuned anew."""
    monkeypatch.setattr(SizeBuckets, "_share", lambda *args: "as if kv were split across blocks")
    dg = dynamic(attention(64))
    gen = torch.Generator().manual_seed(1)
    dg(*inputs(64, gen))
    (choice,) = dg.buckets._choices.values()
    best = choice.report.best
    splits = next(c for c in _points(choice.result, attention(64)) if c.loop == 64)
    monkeypatch.setattr(best, "candidate", splits)     # the loop walks kv one position per iteration
    assert dg.at(*inputs(64, gen)) is not None
    q, kt, v = inputs(37, gen)                           # not 64 tiles at 37: 37 tiles of one position
    (out,) = dg(q, kt, v)
    torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    b37 = bucket([(2, 4, 16), (2, 16, 37), (2, 37, 16)])
    assert dg.tunings[b37] == 1
    report = dg.at(q, kt, v).report
    assert "the model's best of its points here" in report.notes[-1], report.notes
    # the valid point nearest the tuned one walks kv one position per iteration, 37 of them; a wider tile is
    # cheaper, and the model's best of every valid point is taken, not the nearest
    program = attention(37)
    nearest = instantiate(choice.result.graphs[splits.graph], [t.shape for t in program.inputs], "float32",
                          [t.name for t in program.inputs], dataclasses.replace(splits, loop=37))
    assert 0 < report.best.estimate_us < estimate(nearest, dg.buckets.target).seconds * 1e6
    assert report.best.candidate.loop < 37
    monkeypatch.setattr(prism.runtime.buckets.GraphSpace, "tilings", lambda self: [])
    q, kt, v = inputs(36, gen)                           # no valid point of the sGraph at 36: tuned there
    (out,) = dg(q, kt, v)
    torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    assert dg.tunings[b37] == 2


def test_a_bucket_keeps_the_tiles_it_was_tuned_with_at_every_size(monkeypatch):
    """A choice whose loop walks kv in tiles of 16 (tuned at kv = 64: 4 iterations) serves every kv of its bucket
    with tiles of 16 (cdiv(kv, 16) iterations) and one kernel set, which takes kv at launch: kv = 37 is no valid
    point of 4 iterations, and is not tuned again."""
    dg = dynamic(attention(64))
    real = dg.buckets.optimize

    def at(c, program):
        return instantiate(opt.search_result.graphs[c.graph], [t.shape for t in program.inputs], "float32",
                           [t.name for t in program.inputs], c)

    def shareable(c, program) -> bool:   # no accumulator keeps kv (the loop's ragged tiles must not be carried)
        try:
            return bool(plan_graph(at(c, program), sizes={(1, 2): "kv", (2, 1): "kv"}))
        except CodegenError:
            return False

    def loop_of_16(program):
        nonlocal opt
        opt = real(program)
        c = next(c for c in _points(opt.search_result, program) if c.loop == 4 and shareable(c, program))
        monkeypatch.setattr(opt.report.best, "candidate", c)
        return prism.OptimizedGraph(program, at(c, program), opt.report, "cpu", opt.search_result, torch_op=False)

    opt = None

    monkeypatch.setattr(dg.buckets, "optimize", loop_of_16)
    gen = torch.Generator().manual_seed(4)
    for kv in (64, 37, 33, 50, 63):
        q, kt, v = inputs(kv, gen)
        opt = dg.at(q, kt, v)
        assert [b.loop for b in opt.graph.blocks] == [-(-kv // 16)]
        (out,) = dg(q, kt, v)
        torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    (b,) = dg.tunings
    (choice,) = dg.buckets._choices.values()
    assert choice.shared.tiles == {"loop": ("kv", 16)} and choice.shared.plan.sizes == {"kv"}
    assert dg.tunings[b] == 1 and dg.compiles[b] == 1
    assert "no compile" in dg.at(*inputs(50, gen)).report.notes[-1]
    served = dg.at(*inputs(50, gen)).compiled                     # the bucket's kernels, sized for kv = 50
    assert served.source is choice.shared.plan.source
    assert all(".target sm_90" in k.ptx for k in served.aot())   # what a GPU would run: i32 extents, one compile


def test_a_mean_over_a_dynamic_dim_gets_kernels_per_size(searched):
    """rms_norm over d, d dynamic: the mean's 1/d is a constant of the kernels (or a mean over a dim of runtime
    size, which code generation refuses), so the bucket's kernels are not shared, the report says why, and every
    size is right."""
    w, cfg, result = searched("rmsnorm")
    program = w.build(cfg)
    dg = prism.superoptimize(program, dynamic={"d": ["X.1", "W.0", "W.1"]}, search_result=result, cache=False,
                             compile=False, budget=2)
    n, d = program.inputs[0].shape
    gen = torch.Generator().manual_seed(5)
    sizes = [d, d - 1, d // 2 + 1]                                   # one bucket
    for e in sizes:
        x, wt = torch.randn(n, e, generator=gen), torch.randn(e, e, generator=gen)
        (out,) = dg(x.half(), wt.half())
        want = w.reference(x.half().double(), wt.half().double())
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    (b,) = dg.tunings
    (choice,) = dg.buckets._choices.values()
    assert choice.shared is None and ("depends on a size" in choice.why or "a mean over" in choice.why)
    assert dg.compiles[b] == len(sizes)
    assert all(any(choice.why in note for note in opt.report.notes) for opt in dg.buckets._at.values())


def _points(result, program):
    from prism.tune.space import Space

    return Space(result, program).points()


@pytest.mark.parametrize("spec, message", [
    ({"kv": ["K.1"]}, "not INPUT.DIM of an input"),
    ({"kv": ["Kt.3"]}, "Kt has 3 dims"),
    ({"kv": ["Kt.2"], "again": "Kt.-1"}, "named twice"),
    (["Kt.2"], "must be a dict"),
])
def test_a_wrong_dynamic_spec_is_an_input_error(spec, message):
    with pytest.raises(InputError, match=message):
        prism.superoptimize(attention(), dynamic=spec, cache=False, compile=False)


def test_calls_that_do_not_fit_are_input_errors():
    dg = dynamic(attention())
    gen = torch.Generator().manual_seed(2)
    q, kt, v = inputs(8, gen)
    with pytest.raises(InputError, match="'kv' is 8 at Kt.2 but 9 at V.1"):
        dg(q, kt, torch.randn(2, 9, 16))
    with pytest.raises(InputError, match="dim 2 is 17; it is 16 in the program and not declared dynamic"):
        dg(torch.randn(2, 4, 17), kt, v)
    with pytest.raises(InputError, match="takes 3 tensor"):
        dg(q, kt)


INTERPRETED = textwrap.dedent("""
    import json, warnings, torch
    warnings.simplefilter("ignore")
    import prism.codegen.compiled, prism.runtime.buckets
    from prism.runtime.buckets import bucket
    from tests.runtime.test_dynamic import attention, dynamic, inputs
    made = []   # every plan generated (by a bucket, or by a graph's own compile)
    for module in (prism.codegen.compiled, prism.runtime.buckets):
        real = module.plan_graph
        module.plan_graph = lambda *a, real=real, **k: made.append(1) or real(*a, **k)
    dg = dynamic(attention(37))
    gen = torch.Generator().manual_seed(0)
    worst, seen = 0.0, {}
    def call(kv):
        global worst
        q, kt, v = inputs(kv, gen)
        (out,) = dg(q, kt, v)
        worst = max(worst, (out - torch.softmax(q @ kt * 0.25, -1) @ v).abs().max().item())
        opt = dg.at(q, kt, v)
        b = str(bucket([t.shape for t in (q, kt, v)])[1][2])
        seen.setdefault(b, set()).add((id(opt.compiled.module), id(opt.compiled.plan.source), opt.execution))
    for kv in [37, *range(1, 41), 63, 64, 65, 127, 129, 513, 1000]:
        call(kv)
    before = len(made), dict(dg.compiles)
    for kv in (41, 42, 45, 50, 55, 61, 100, 120, 600, 700):     # new sizes in tuned buckets
        call(kv)
    print(json.dumps({"worst": worst, "plans": [before[0], len(made)], "compiles": [sorted(before[1].values()),
                      sorted(dg.compiles.values())], "tunings": sorted(dg.tunings.values()),
                      "kernels": {b: len(s) for b, s in seen.items()},
                      "execution": sorted({e for s in seen.values() for _, _, e in s})}))
""")


def test_under_the_interpreter_a_new_size_in_a_tuned_bucket_runs_the_buckets_kernels(tmp_path):
    """One DynamicGraph, kv = 1 ... 40 and odd sizes up to 1000 through Triton's interpreter: right at every size,
    one tuning and one kernel set per bucket (kv = 1 and 2 are buckets of one size), and a call at a new size
    of a tuned bucket generates no source and loads no module: it runs the bucket's kernels."""
    got = json.loads(interpreted(INTERPRETED, tmp_path)[-1])
    assert got["worst"] < 1e-4
    assert got["execution"] == ["interpreter"]
    assert set(got["tunings"]) == {1} and set(got["compiles"][1]) == {1}
    assert got["compiles"][0] == got["compiles"][1]               # the new sizes compiled nothing
    assert got["plans"][0] == got["plans"][1]                     # ... and generated no source
    assert set(got["kernels"].values()) == {1}                    # one module, one source per bucket


def test_a_bucket_is_tuned_at_its_top_sizes():
    """The first call at kv = 37 tunes at kv = 64, its bucket's top: the tiles tuned there are powers of two, which
    the bucket's kernels count at launch (at 37 = a prime, a loop over kv could only have tiles of 1 or 37)."""
    dg = dynamic(attention(37))
    gen = torch.Generator().manual_seed(5)
    for kv in (37, 50, 33):
        q, kt, v = inputs(kv, gen)
        (out,) = dg(q, kt, v)
        torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    (choice,) = dg.buckets._choices.values()
    assert [list(s) for s in choice.shapes] == [[2, 4, 16], [2, 16, 64], [2, 64, 16]]
    (b,) = dg.tunings
    assert dg.tunings[b] == 1
    assert ("the choice tuned at sizes [[2, 4, 16], [2, 16, 64], [2, 64, 16]] reused at [[2, 4, 16], [2, 16, 37]"
            in dg.at(*inputs(37, gen)).report.notes[-1])


def test_what_a_program_keeps_per_size_is_bounded():
    """A decode loop calls at a new size every step: the least recently used sizes are dropped."""
    from prism.runtime.buckets import Recent

    kept = Recent(3)
    for n in range(5):
        kept[n] = n
    assert list(kept) == [2, 3, 4]
    assert kept[2] == 2          # used: now the most recent
    kept[5] = 5
    assert list(kept) == [4, 2, 5]


def test_a_decode_of_2000_steps_holds_its_kernels_and_memory_flat():
    """KV 1000 → 3000, one new length per step, through one DynamicGraph: one tuning per bucket (1024, 2048, 4096),
    and over the last 700 steps no kernel set compiled and traced memory moving by less than one MB (one
    OptimizedGraph kept per size would add about 25). The 2048 bucket's tuned pick is a split-KV form whose kernels
    are per size: after PER_SIZE_COMPILES of its sizes the bucket takes the best candidate whose kernels every size
    shares, and says so. Each step makes the size's state as a call does (`at`); every 100th runs, against torch."""
    import gc
    import tracemalloc

    from prism.runtime.buckets import PER_SIZE_COMPILES

    dg = dynamic(attention(1000))
    gen = torch.Generator().manual_seed(7)
    q, kt, v = inputs(3000, gen)
    used, compiled = 0, None
    for kv in range(1000, 3000):
        if kv == 2000:      # traced from here; what was made before is not, so its release cannot be seen
            tracemalloc.start()
        if kv == 2300:      # by now every size kept was made while traced
            gc.collect()
            used, compiled = tracemalloc.get_traced_memory()[0], dict(dg.compiles)
        args = (q, kt[:, :, :kv].contiguous(), v[:, :kv].contiguous())
        if kv % 100 == 0:
            (out,) = dg(*args)
            torch.testing.assert_close(out, torch.softmax(args[0] @ args[1] * 0.25, -1) @ args[2],
                                       rtol=1e-5, atol=1e-5)
        else:
            dg.at(*args)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - used
    tracemalloc.stop()
    assert grown < 1_000_000, grown
    assert len(dg.buckets._at) == dg.buckets._at.size
    assert dict(dg.compiles) == compiled, (compiled, dg.compiles)
    assert sorted(dg.tunings.values()) == [1, 1, 1]
    assert max(dg.compiles.values()) <= PER_SIZE_COMPILES + 1
    assert all(c.shared is not None for c in dg.buckets._choices.values())
    b2048 = bucket([(2, 4, 16), (2, 16, 2048), (2, 2048, 16)])
    assert dg.compiles[b2048] == PER_SIZE_COMPILES + 1
    assert any("its kernels serve every size" in n for n in dg.buckets._choices[b2048].report.notes)
