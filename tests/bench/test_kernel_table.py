"""prism.bench.kernels: rows from torch.profiler's averages, GB/s against the copy bandwidth, Prism's bytes from its
compile record, the one table, the JSON file."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEventAvg

from prism.bench.kernels import KernelRow, format_table, kernel_rows, prism_bytes, program_bytes, read_json, write_json
from prism.ir import KernelGraph

STEPS = 20


def event(key: str, count: int, device_us: float, device: DeviceType = DeviceType.CUDA) -> SimpleNamespace:
    """A key_averages() entry with the attributes kernel_rows reads (`test_the_real_average_has_them`)."""
    return SimpleNamespace(key=key, count=count, device_time_total=device_us, device_type=device)


def test_the_real_average_has_them():
    avg = FunctionEventAvg()
    assert all(hasattr(avg, name) for name in ("key", "count", "device_time_total", "device_type"))


def test_rows_are_device_events_per_step_most_time_first():
    averages = [event("cudaLaunchKernel", 80, 0.0, DeviceType.CPU), event("Memset (Device)", 20, 20.0),
                event("gemv", 40, 2000.0), event("kernel_0", 200, 1000.0)]
    rows = kernel_rows(averages, STEPS, {"gemv": 8e6, "absent": 1.0})
    assert rows == [KernelRow("gemv", 2.0, 100.0, 8e6), KernelRow("kernel_0", 10.0, 50.0),
                    KernelRow("Memset (Device)", 1.0, 1.0)]


def test_a_real_cpu_profile_has_no_device_rows():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert any(e.key == "aten::matmul" for e in prof.key_averages())
    assert kernel_rows(prof.key_averages(), 1) == []


def test_gb_per_s_and_share_of_copy():
    row = KernelRow("gemv", calls=2, us=100.0, bytes=8e6)  # 16 MB in 100 µs
    assert row.gb_per_s == pytest.approx(160.0)
    assert row.of_copy(3.2e12) == pytest.approx(5.0)
    assert row.of_copy(None) is None
    assert KernelRow("k", 1, 10.0).gb_per_s is None and KernelRow("k", 1, 10.0).of_copy(3.2e12) is None
    assert KernelRow("k", 1, 0.0, 64).gb_per_s is None


def program() -> KernelGraph:
    g = KernelGraph()
    x, w = g.input((8, 2048), "float16", "x"), g.input((2048, 5632), "float16", "w")
    h = g.matmul(x, w)
    g.output(g.silu(h), g.sum(h, 1))
    return g


def test_program_bytes_are_inputs_and_outputs_once():
    # x 8·2048·2 + w 2048·5632·2 + silu 8·5632·2 + sum 8·1·2; the matmul's value stays inside
    assert program_bytes(str(program())) == 32768 + 23068672 + 90112 + 16
    g = KernelGraph()
    x = g.input((4, 3), "float32", "x")
    g.output(x, g.exp(x))          # an input that is also an output is read, never written
    assert program_bytes(str(g)) == 2 * 4 * 3 * 4
    assert program_bytes("kernel graph\n  x: int8[4] = input\n  outputs: x") is None
    assert program_bytes("not a graph") is None


def test_prism_bytes_only_where_each_region_is_one_kernel():
    small = KernelGraph()
    x = small.input((2, 8), "float16", "x")
    small.output(small.exp(x))
    regions = [{"program": str(program()), "launches": 1}, {"program": str(small), "launches": 1}]
    assert prism_bytes(regions) == {"kernel_0": (23191568 + 64) / 2}
    assert prism_bytes(regions[:1] + [{"program": str(small), "launches": 2}]) == {}
    assert prism_bytes(regions[:1] + [{"program": str(small), "launches": None}]) == {}
    assert prism_bytes([{"program": "unreadable", "launches": 1}]) == {}
    assert prism_bytes([]) == {}


BACKENDS = {"eager": [KernelRow("fill", 2, 4.0), KernelRow("gemv", 2, 100.0, 8e6)],
            "prism": [KernelRow("kernel_0", 10, 50.0, 1.6e6)]}


def test_one_table_sorted_within_each_backend_with_totals():
    assert format_table(BACKENDS, 3.2e12).splitlines() == [
        "| backend | kernel | calls/step | µs/step | share of step | GB/s | % of copy |",
        "|---|---|---|---|---|---|---|",
        "| eager | gemv | 2 | 100.0 | 96.2% | 160 | 5% |",
        "| eager | fill | 2 | 4.0 | 3.8% |  |  |",
        "| eager | total (2 kernels) | 4 | 104.0 | 100.0% |  |  |",
        "| prism | kernel_0 | 10 | 50.0 | 100.0% | 320 | 10% |",
        "| prism | total (1 kernel) | 10 | 50.0 | 100.0% | 320 | 10% |",
    ]


def test_long_names_are_cut_in_the_table_and_pipes_escaped():
    name = "void cutlass::Kernel<" + "x" * 100 + "|>"
    (line,) = format_table({"eager": [KernelRow(name, 1, 1.0)]}, None).splitlines()[2:3]
    cell = line.split(" | ")[1]
    assert len(cell) == 80 and cell.endswith("…") and "|" not in cell


def test_json_round_trip_keeps_rows_and_writes_their_figures(tmp_path):
    doc = {"device": "NVIDIA H100 80GB HBM3", "copy_bytes_per_s": 3.2e12, "layers": 2, "steps": STEPS,
           "command": "python benchmarks/hf_decode.py --llama2048 --kernels", "batches": [
               {"batch": 1, "backends": BACKENDS}, {"batch": 8, "backends": {"eager": [KernelRow("gemv", 2, 1.0)]}}]}
    path = tmp_path / "kernels.json"
    write_json(path, doc)
    assert read_json(path) == doc
    gemv = json.loads(path.read_text())["batches"][0]["backends"]["eager"][1]
    assert gemv == {"kernel": "gemv", "calls_per_step": 2, "us_per_step": 100.0, "bytes_per_call": 8e6,
                    "gb_per_s": pytest.approx(160.0), "pct_of_copy": pytest.approx(5.0)}
