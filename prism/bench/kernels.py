"""A step's kernels side by side: per-kernel device times from torch.profiler, GB/s, one table, JSON.

A row is one kernel name of one backend's step: calls and device µs per step, and, where the bytes one call
moves are known, its GB/s and its share of the device-to-device copy bandwidth (the practical ceiling of a
memory-bound kernel; prism.bench.gpu.copy_bandwidth measures it). Bytes are given by the caller and never
guessed: a kernel without them has no GB/s. For Prism's kernels `prism_bytes` derives them from the compile
record (prism.capture.history) where it can.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from prism.ir.ops import TORCH_DTYPES
from prism.outputs import write_text

__all__ = ["KernelRow", "format_table", "kernel_rows", "prism_bytes", "program_bytes", "read_json", "write_json"]


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a step: `calls` per step, `us` device µs per step (all its calls), `bytes` one call moves
    (None: unknown)."""

    name: str
    calls: float
    us: float
    bytes: float | None = None

    @property
    def gb_per_s(self) -> float | None:
        """Bytes moved per second of device time, in GB/s (1e9 bytes); None without bytes or time."""
        if self.bytes is None or self.us <= 0:
            return None
        return self.bytes * self.calls / self.us * 1e-3

    def of_copy(self, copy_bps: float | None) -> float | None:
        """GB/s as a percentage of a copy bandwidth in bytes/s; None where either is unknown."""
        gbps = self.gb_per_s
        return None if gbps is None or not copy_bps else gbps * 1e11 / copy_bps

    def to_json(self, copy_bps: float | None) -> dict[str, Any]:
        """The row with its GB/s and % of `copy_bps` written out, for readers of the file."""
        return {"kernel": self.name, "calls_per_step": self.calls, "us_per_step": self.us,
                "bytes_per_call": self.bytes, "gb_per_s": self.gb_per_s, "pct_of_copy": self.of_copy(copy_bps)}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> KernelRow:
        """The row `to_json` wrote (its derived figures are recomputed, not read)."""
        return cls(row["kernel"], row["calls_per_step"], row["us_per_step"], row["bytes_per_call"])


def kernel_rows(averages: Iterable[Any], steps: int, nbytes: Mapping[str, float] | None = None) -> list[KernelRow]:
    """Rows from torch.profiler's `key_averages()` of a profile over `steps` steps (prism.tune.profile.
    kernel_profile), most device time first. Only device events count (kernels, memcpys, memsets: what the GPU
    ran); host events (the CUDA runtime calls that launch them) are left out. `nbytes`: bytes per call by kernel
    name, where known."""
    nbytes = nbytes or {}
    rows = [KernelRow(e.key, e.count / steps, e.device_time_total / steps, nbytes.get(e.key))
            for e in averages if e.device_type != torch.autograd.DeviceType.CPU]
    return sorted(rows, key=lambda r: -r.us)


_TENSOR = re.compile(r"([^\s:,]+): (\w+)\[([\d, ]*)\]")
"""One `name: dtype[shape]` of a printed kernel graph's left-hand side (prism.ir.printer)."""


def program_bytes(program: str) -> int | None:
    """The DRAM floor of a kernel graph printed by prism.ir.printer (a compile record's "program"): the bytes of
    its inputs, each read once, and of its outputs, each written once (as prism.tune.tuner.floor_seconds). None
    where the text names a tensor whose type it does not give, or a dtype Prism does not have: the benchmark
    that reads it runs for minutes on a GPU, and a table without these bytes is better than none."""
    types: dict[str, tuple[str, str]] = {}
    inputs: list[str] = []
    outputs: list[str] = []
    for line in program.splitlines():
        if line.startswith("    "):  # a custom op's block graph
            continue
        if line.startswith("  outputs: "):
            outputs = line.removeprefix("  outputs: ").split(", ")
            continue
        lhs, _, rhs = line.partition(" = ")
        found = _TENSOR.findall(lhs)
        types.update((name, (dtype, shape)) for name, dtype, shape in found)
        if rhs == "input":
            inputs += [name for name, _, _ in found]

    names = inputs + [o for o in outputs if o not in inputs]
    if not outputs or any(n not in types or types[n][0] not in TORCH_DTYPES for n in names):
        return None
    return sum(math.prod(int(d) for d in types[n][1].split(", ") if d) * TORCH_DTYPES[types[n][0]].itemsize
               for n in names)


def prism_bytes(replaced: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Bytes per call of Prism's kernels in a step whose replaced regions are `replaced` (a prism.capture.history
    record's "replaced": every region of the step, each called once per step). Prism names each region's kernels
    kernel_0, kernel_1, … (prism.codegen.plan), so the profiler merges the regions' first kernels into one row,
    "kernel_0". Where every region is one launch, that row is every region's whole work, and its bytes per call
    are the mean of the regions' DRAM floors (`program_bytes`): a lower bound on what the kernels move, since a
    kernel may read a tile twice. A region of several launches (or of none known yet) does not say how its floor
    splits between its kernels, and a program `program_bytes` cannot read has no floor: then nothing is known."""
    floors = [program_bytes(r["program"]) for r in replaced if r.get("launches") == 1]
    known = [f for f in floors if f is not None]
    if not replaced or len(known) < len(replaced):
        return {}
    return {"kernel_0": sum(known) / len(known)}


NAME_WIDTH = 80
"""Characters of a kernel name in the table (the JSON keeps it whole): C++ kernels' names run to hundreds."""


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "" if value is None else f"{value:{spec}}{suffix}"


def _line(backend: str, name: str, row: KernelRow, total_us: float, copy_bps: float | None) -> str:
    share = 100 * row.us / total_us if total_us else None
    cells = [backend, name.replace("|", "/"), f"{row.calls:.4g}", f"{row.us:.1f}", _num(share, ".1f", "%"),
             _num(row.gb_per_s, ".0f"), _num(row.of_copy(copy_bps), ".0f", "%")]
    return "| " + " | ".join(cells) + " |"


def format_table(backends: Mapping[str, Sequence[KernelRow]], copy_bps: float | None) -> str:
    """One markdown table of every backend's kernels, most device time first within each backend, and a total
    line per backend (its GB/s only where every kernel's bytes are known)."""
    lines = ["| backend | kernel | calls/step | µs/step | share of step | GB/s | % of copy |", "|" + "---|" * 7]
    for backend, rows in backends.items():
        total_us = sum(r.us for r in rows)
        for r in sorted(rows, key=lambda r: -r.us):
            name = r.name if len(r.name) <= NAME_WIDTH else r.name[:NAME_WIDTH - 1] + "…"
            lines.append(_line(backend, name, r, total_us, copy_bps))
        known = bool(rows) and all(r.bytes is not None for r in rows)
        calls = sum(r.calls for r in rows)
        total = KernelRow("", calls, total_us, sum(r.bytes * r.calls for r in rows) / calls if known else None)
        lines.append(_line(backend, f"total ({len(rows)} kernel{'s' * (len(rows) != 1)})", total, total_us, copy_bps))
    return "\n".join(lines)


def write_json(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """Write `doc` to `path`: device, copy_bytes_per_s, layers, steps, command, and "batches", a list of
    {"batch": n, "backends": {backend: [KernelRow, ...]}}; each row with its GB/s and % of the copy bandwidth."""
    copy_bps = doc.get("copy_bytes_per_s")
    out = dict(doc, batches=_each_row(doc["batches"], lambda r: r.to_json(copy_bps)))
    write_text(path, json.dumps(out, indent=1, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The document `write_json` wrote, its rows as KernelRows."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return doc | {"batches": _each_row(doc["batches"], KernelRow.from_json)}


def _each_row(batches: Sequence[Mapping[str, Any]], fn: Callable[[Any], Any]) -> list[dict[str, Any]]:
    return [{"batch": b["batch"], "backends": {name: [fn(r) for r in rows] for name, rows in b["backends"].items()}}
            for b in batches]
