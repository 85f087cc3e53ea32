"""Cost-model calibration: samples and calibrations round-trip, bad files are refused, the fit recovers
constants it is shown, and the shipped calibration is what `get_target` applies."""

from __future__ import annotations

import json

import pytest

import prism.workloads as wl
from prism.tune import estimate
from prism.tune.calibration import DATA, FITTED, Calibration, CalibrationError, load
from prism.tune.fit import Sample, fit, held_out, log_error, predict
from prism.tune.cost import KernelWork
from prism.tune.target import H100, H200, calibrated, get_target


def _samples(target=H100) -> list[Sample]:
    """Kernels of several hand-written graphs at several configs, 'measured' as `target`'s model says."""
    out = []
    for name in ("rmsnorm", "swiglu", "attention"):
        w = wl.get(name)
        for cfg in w.configs:
            for grid_scale in (False, True):
                g = w.fused(cfg) if not grid_scale or name == "attention" else w.fused(cfg, grid=16)
                kernels = tuple(k.work for k in estimate(g, H100).kernels)
                out.append(Sample(name, f"{cfg} {grid_scale}", kernels, 0.0))
    return [Sample(s.group, s.label, s.kernels, p) for s, p in zip(out, predict(out, target))]


def test_samples_and_kernel_work_round_trip_through_json():
    for s in _samples():
        back = Sample.from_json(json.loads(json.dumps(s.to_json())))
        assert back == s
        assert all(isinstance(k, KernelWork) and isinstance(k.grid, tuple) for k in back.kernels)


def test_a_calibration_saves_loads_and_applies(tmp_path):
    values = {k: getattr(H100, k) * 1.5 for k in FITTED}
    cal = Calibration("h100", "NVIDIA H100 80GB HBM3", values, {"samples": 3})
    path = cal.save(tmp_path / "sub" / "h100.json")
    back = load(path)
    assert back == cal
    t = H100.with_calibration(back)
    assert all(getattr(t, k) == pytest.approx(v) for k, v in values.items())
    assert t.name.startswith(H100.name) and cal.digest in t.name
    assert t.sms == H100.sms and t.peak_bandwidth == H100.peak_bandwidth        # limits are not fitted


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d.update(format="other"), "not a Prism calibration"),
    (lambda d: d["values"].pop("launch"), "missing \\['launch'\\]"),
    (lambda d: d["values"].update(bogus=1.0), "unknown \\['bogus'\\]"),
    (lambda d: d["values"].update(launch=-1.0), "positive numbers; not so: launch"),
    (lambda d: d["values"].update(launch="fast"), "positive numbers; not so: launch"),
])
def test_a_bad_calibration_file_is_refused_naming_the_file(tmp_path, edit, message):
    doc = Calibration("h100", "x", {k: getattr(H100, k) for k in FITTED}).to_json()
    edit(doc)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CalibrationError, match=message) as caught:
        load(path)
    assert str(path) in str(caught.value)
    (tmp_path / "t.json").write_text("{nope")
    with pytest.raises(CalibrationError, match="not JSON"):
        load(tmp_path / "t.json")
    with pytest.raises(CalibrationError, match="cannot read"):
        load(tmp_path / "missing.json")


def test_the_fit_recovers_constants_it_is_shown_and_is_deterministic():
    truth = H100.with_(launch=6e-6, dram_latency=1.4e-6, warp_inflight=1024.0)
    samples = _samples(truth)
    assert log_error(samples, H100) > 0.01
    values = fit(samples, H100)
    assert log_error(samples, H100.with_(**values)) < log_error(samples, H100) / 10
    assert fit(samples, H100) == values
    with pytest.raises(CalibrationError, match="no measured samples"):
        fit([], H100)


def test_the_held_out_split_is_per_group_seeded_and_disjoint():
    samples = _samples()
    train, test = held_out(samples, seed=1)
    assert sorted(s.label + s.group for s in train + test) == sorted(s.label + s.group for s in samples)
    assert not set(map(id, train)) & set(map(id, test))
    assert {s.group for s in test} == {s.group for s in samples}
    assert held_out(samples, seed=1) == (train, test)


def test_get_target_applies_the_shipped_calibration():
    path = DATA / "h100.json"
    assert path.exists(), "a calibration for the H100 ships with Prism (benchmarks/tune_calibrate.py fit)"
    cal = load(path)
    assert cal.kind == "h100" and cal.source["samples"] > 0
    t = get_target()
    assert t == H100.with_calibration(cal) == get_target("NVIDIA H100 80GB HBM3") == calibrated("h100")
    assert get_target(H100) is H100                                   # a Target passed in is used as is
    assert get_target("h200") == (H200.with_calibration(load(DATA / "h200.json")) if (DATA / "h200.json").exists() else H200)


def test_a_constant_held_at_zero_is_a_term_turned_off_and_stays_so():
    """`tune_calibrate.py regret --without warp_cost` fits the model with that term off: a constant that starts
    at 0 is left out of the fit (multiplying it would leave it 0, dividing by it would fail)."""
    samples = _samples(H100.with_(launch=6e-6))
    values = fit(samples, H100.with_(warp_cost=0.0))
    assert values["warp_cost"] == 0.0 and values["launch"] != H100.launch
