"""`prism.superoptimize(program, dynamic=...)`: one DynamicGraph for every size of its dynamic dims, searched
once and tuned once per size bucket (prism.runtime.dynamic)."""

from __future__ import annotations

import pytest
import torch

import prism
from prism.errors import InputError
from prism.runtime.dynamic import bucket

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
    assert len(searches) == 1
    assert "reused" in dg.at(*inputs(37, gen)).report.notes[-1]


def test_a_choice_that_is_no_valid_point_at_a_new_size_is_tuned_there(monkeypatch):
    """The bucket's choice is not stretched: a point whose tiles do not divide the new extent is tuned anew."""
    dg = dynamic(attention(64))
    gen = torch.Generator().manual_seed(1)
    dg(*inputs(64, gen))
    (choice,) = dg.buckets._choices.values()
    best = choice.report.best
    splits = next(c for c in _points(choice.result, attention(64)) if c.loop == 64)
    monkeypatch.setattr(best, "candidate", splits)     # the loop walks kv one position per iteration
    assert dg.at(*inputs(64, gen)) is not None
    q, kt, v = inputs(37, gen)                           # not 64 tiles at 37: no valid point
    (out,) = dg(q, kt, v)
    torch.testing.assert_close(out, torch.softmax(q @ kt * 0.25, -1) @ v, rtol=1e-5, atol=1e-5)
    assert dg.tunings[bucket([(2, 4, 16), (2, 16, 37), (2, 37, 16)])] == 2


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
