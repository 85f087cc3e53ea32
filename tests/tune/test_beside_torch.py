"""A program's chosen kernels timed beside torch (prism.tune.profile.beside_torch), with a counting timer in
place of the CUDA-graph replay, so what is timed, what is checked first and what the report says run on a CPU."""

from __future__ import annotations

import pytest
import torch

import prism
from prism.tune.profile import beside_torch
from prism.tune.report import Report


def _timer(times: dict[str, float], calls: list):
    """A timer giving each function the µs named for it (by the first output it computes), remembering calls."""
    def timer(fn, copies):
        calls.append(len(copies))
        got = fn(*copies[0])
        got = got if isinstance(got, torch.Tensor) else got[0]
        return times[round(float(got.flatten()[0]), 4)] * 1e-6
    return timer


def _prism(x):
    return [x * 2 + 1]


def test_prism_eager_and_inductor_are_timed_in_one_harness_after_their_outputs_are_checked():
    x = torch.arange(8.0).reshape(2, 4) / 8
    calls: list = []
    out = beside_torch(_prism, lambda x: x * 2 + 1, [x], timer=_timer({1.0: 3.0}, calls))
    assert {k: out[k] for k in ("prism_us", "eager_us", "inductor_us")} == {
        "prism_us": 3.0, "eager_us": 3.0, "inductor_us": 3.0}
    assert len(calls) == 3 and len(set(calls)) == 1     # the same input copies for all three
    assert "inductor_error" not in out and "CUDA-graph replay" in out["how"]


def test_torch_ops_that_compute_something_else_are_not_timed():
    x = torch.ones(2, 4)
    calls: list = []
    out = beside_torch(_prism, lambda x: x * 2, [x], inductor=False, timer=_timer({}, calls))
    assert set(out) == {"why"} and "disagrees with Prism's kernels" in out["why"] and not calls


def _fails(*args, **kwargs):
    raise RuntimeError("no compiler here\nmore")


@pytest.mark.parametrize("compile_, error", [
    (_fails, "failed: RuntimeError: no compiler here"),
    (lambda fn, **kwargs: lambda x: fn(x) + 1, "disagrees with Prism's kernels (relative error 1.0e+00)")])
def test_an_inductor_that_fails_or_disagrees_is_a_finding_and_the_rest_is_still_timed(monkeypatch, compile_, error):
    monkeypatch.setattr(torch, "compile", compile_)
    calls: list = []
    out = beside_torch(_prism, lambda x: x * 2 + 1, [torch.zeros(2, 4)], timer=_timer({1.0: 5.0}, calls))
    assert out["inductor_error"] == error and len(calls) == 2
    assert "inductor_us" not in out and out["prism_us"] == out["eager_us"] == 5.0
    assert Report("gpu-profile", "H200", torch=out).torch_text == (
        f"eager 5.00 µs, Inductor {error}; Prism 5.00 µs, 1.00x faster than torch (CUDA-graph replay medians, "
        "one process)")


@pytest.mark.parametrize("torch_us, says", [((9.1, 6.2), "1.55x faster than torch"),
                                            ((9.1, 3.1), "1.29x slower than torch")])
def test_the_report_says_the_times_and_the_ratio_against_torchs_faster(torch_us, says):
    rep = Report("gpu-profile", "H200")
    rep.torch = {"eager_us": torch_us[0], "inductor_us": torch_us[1], "prism_us": 4.0, "how": "one process"}
    assert rep.torch_text == (f"eager {torch_us[0]:.2f} µs, Inductor {torch_us[1]:.2f} µs; Prism 4.00 µs, "
                              f"{says} (one process)")
    assert Report.from_json(rep.to_json()).torch == rep.torch
    assert f"against torch: {rep.torch_text}" in rep.summary()


def test_on_the_cpu_the_report_says_torch_was_not_timed():
    g = prism.KernelGraph()
    x = g.input((4, 32), name="X")
    g.output(g.relu(x))
    with pytest.warns(RuntimeWarning, match="no GPU"):
        opt = prism.superoptimize(g, budget=1, device="cpu")
    assert opt.against_torch()["why"].startswith("not timed: no GPU")
    assert opt.report.to_json()["torch"] == opt.report.torch
