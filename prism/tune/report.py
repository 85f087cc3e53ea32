"""The tuning report: every candidate tried, how it was judged, the one chosen and why; a printable table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Sequence

from prism.tune.space import Candidate

__all__ = ["COST_MODEL", "GPU_PROFILE", "PER_OUTPUT", "Entry", "Report", "Status", "UNFUSED"]

COST_MODEL = "cost-model"
GPU_PROFILE = "gpu-profile"
UNFUSED = -1
"""Candidate.graph of the baseline: the program itself, one generated kernel per op."""
PER_OUTPUT = "per output"
"""Entry.origin of a program's choice when its outputs were tuned one at a time: their choices together."""


class Status(StrEnum):
    """A candidate's fate in a tuning: not yet judged, usable, the one chosen, or dropped (its `Entry.why`)."""

    PENDING = "pending"
    OK = "ok"
    CHOSEN = "chosen"
    DROPPED = "dropped"


@dataclass
class Entry:
    """One candidate: where it came from ("model": the cost model's best; "random": a uniform draw; "kept": a
    point the tuning was told to try, the fastest measured before (TuneOptions.keep); "baseline": the unfused
    program; "per output": the choices of a program with several outputs, together), its estimate, its time if
    measured, its kernels, its fate (`status`, and `why` it was dropped), and `risk`: why it can overflow
    (prism.tune.safety), None if it cannot. `output`: the output it was tuned for, when a program with several
    outputs was tuned one output at a time; `text`: a label of its own (the joined choice's). `seconds`: where
    its tuning time went, "compile" (ahead of time, in a worker: prism.tune.compile) and on a GPU "load", "check"
    and "time" (prism.tune.profile.Timing)."""

    candidate: Candidate
    origin: str
    estimate_us: float | None = None
    measured_us: float | None = None
    kernels: list[dict[str, Any]] = field(default_factory=list)
    status: Status = Status.PENDING
    risk: str | None = None
    output: int | None = None
    text: str | None = None
    why: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in (Status.OK, Status.CHOSEN)

    def drop(self, why: str) -> None:
        """Mark it dropped, and why (it did not compile, needs too much shared memory, failed or was wrong)."""
        self.status, self.why = Status.DROPPED, why

    @property
    def us(self) -> float | None:
        """Its time: the measured median where it was timed, else the cost model's estimate (None if neither)."""
        return self.measured_us if self.measured_us is not None else self.estimate_us

    @property
    def fate(self) -> str:
        """Its status as a table and a message say it: "ok", "chosen", "dropped: <why>"."""
        return f"{self.status}: {self.why}" if self.why else str(self.status)

    @property
    def label(self) -> str:
        if self.text is not None:
            return self.text
        name = "unfused program" if self.candidate.graph == UNFUSED else str(self.candidate)
        if self.output is None:
            return name
        return f"output {self.output}: {name}" if isinstance(self.output, int) else \
            f"outputs {'+'.join(map(str, self.output))}: {name}"

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json(), "origin": self.origin, "estimate_us": self.estimate_us,
                "measured_us": self.measured_us, "kernels": self.kernels, "status": str(self.status),
                "why": self.why, "risk": self.risk, "output": self.output, "text": self.text, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Entry:
        """An entry saved by to_json; one saved before `why` (status "dropped: <why>") too."""
        status, _, why = str(d.get("status", "ok")).partition(": ")
        return cls(Candidate.from_json(d["candidate"]), d["origin"], d.get("estimate_us"), d.get("measured_us"),
                   list(d.get("kernels", [])), Status(status), d.get("risk"), d.get("output"), d.get("text"),
                   d.get("why", why or None), dict(d.get("seconds", {})))


@dataclass
class Report:
    """What `prism.superoptimize` did. `method` is COST_MODEL (no GPU: ranked by `prism.tune.cost`
    after ahead-of-time compilation) or GPU_PROFILE (timed with do_bench); `execution` says how the
    result runs (CUDA kernels, Triton's interpreter, or the reference executor)."""

    method: str
    target: str
    entries: list[Entry] = field(default_factory=list)
    chosen: int | None = None
    reason: str = ""
    execution: str = ""
    spearman: float | None = None
    space: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    floor_us: float | None = None
    cached: bool = False
    forms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per form of the ranked sGraphs (prism.search.result.SymbolicGraph.form): how many sGraphs, and the best
    ranked point's label, estimate and safety, so forms no pick came from are seen beside the others."""
    torch: dict[str, Any] = field(default_factory=dict)
    """The program as torch runs it, beside the choice (OptimizedGraph.against_torch): `eager_us`,
    `inductor_us` and `prism_us` timed in one harness, or `why` it was not timed; empty where nobody asked."""

    @classmethod
    def joined(cls, parts: Sequence[Report], baseline_us: float | None = None,
               outputs: Sequence[Sequence[int]] | None = None) -> Report:
        """The report of a program with several outputs, tuned in parts (`outputs`: each part's outputs; default
        one output each): first the parts' choices together (chosen: their kernels run one after another, so
        times and estimates add up), then the whole program unfused (the baseline, estimated at `baseline_us`:
        the parts' own baselines each recompute what outputs share), then every part's entries marked with
        their outputs. No DRAM floor: the parts' floors count an input they share once each."""
        names = [f"output {k}" for k in range(len(parts))] if outputs is None else \
            [f"output {o[0]}" if len(o) == 1 else f"outputs {'+'.join(map(str, o))}" for o in outputs]
        for k, part in enumerate(parts):
            for e in part.entries:
                e.output = k if outputs is None else outputs[k][0] if len(outputs[k]) == 1 else list(outputs[k])
        picks = [p.best for p in parts]
        bases = [next(e for e in p.entries if e.origin == "baseline") for p in parts]
        if any(e is None for e in picks):
            raise ValueError("Report.joined: every part must have chosen a candidate")

        def total(key: str) -> float | None:
            values = [getattr(e, key) for e in picks]
            return None if any(v is None for v in values) else sum(values)

        chosen = Entry(picks[0].candidate, PER_OUTPUT, total("estimate_us"), total("measured_us"),
                       [k for e in picks for k in e.kernels], Status.CHOSEN,  # type: ignore[union-attr]
                       next((e.risk for e in picks if e.risk), None),  # type: ignore[union-attr]
                       text=" + ".join(e.label for e in picks))  # type: ignore[union-attr]
        base = Entry(Candidate(UNFUSED, (), 1), "baseline", baseline_us, status=Status.OK,
                     risk=next((e.risk for e in bases if e.risk), None))
        first = parts[0]
        out = cls(first.method, first.target, execution=first.execution, chosen=0)
        out.entries = [chosen, base] + [e for p in parts for e in p.entries]
        out.reason = ("each output" if outputs is None or all(len(o) == 1 for o in outputs) else "each part") + \
            " tuned as a program of its own: " + "; ".join(
            f"{name}: {p.reason}" for name, p in zip(names, parts))
        out.space = {"outputs": sum(map(len, outputs)) if outputs else len(parts)} | \
            ({"parts": len(parts)} if outputs and len(outputs) != sum(map(len, outputs)) else {}) | \
            {"points": sum(p.space.get("points", 0) for p in parts)}
        out.search = {"source": "per output", "graphs": sum(p.search.get("graphs", 0) for p in parts),
                      "seconds": sum(p.search.get("seconds") or 0.0 for p in parts),
                      "parts": [dict(p.search) | {"name": name} for name, p in zip(names, parts)]}
        phases = dict.fromkeys(k for p in parts for k in p.seconds)
        out.seconds = {key: sum(p.seconds.get(key, 0.0) for p in parts) for key in phases}
        out.notes = [f"{name}: {n}" for name, p in zip(names, parts) for n in p.notes]
        out.cached = all(p.cached for p in parts)
        return out

    @property
    def best(self) -> Entry | None:
        return None if self.chosen is None else self.entries[self.chosen]

    def choose(self, index: int, why: str) -> None:
        """Make entry `index` the chosen one in place of the tuning's pick (which stays, usable), and say why."""
        if self.best is not None:
            self.best.status = Status.OK
        self.chosen = index
        self.entries[index].status = Status.CHOSEN
        self.reason = f"{why}; the tuning's pick: {self.reason}" if self.reason else why

    @property
    def unfused(self) -> bool:
        """Whether the chosen candidate is the unfused program: no fused kernel beat one generated kernel per op
        (the backend then leaves the ops to torch: prism.capture.backend, prism.capture.dynamic)."""
        return self.best is not None and self.best.candidate.graph == UNFUSED

    @property
    def method_text(self) -> str:
        if self.method == GPU_PROFILE:
            return f"GPU profiling (triton.testing.do_bench medians) on {self.target}"
        return (f"analytical cost model (prism.tune.cost) for {self.target}, no GPU timing; candidates "
                "compiled ahead of time to PTX where shown")

    @property
    def torch_text(self) -> str:
        """The torch line: "eager 9.10 µs, Inductor 6.20 µs; Prism 4.00 µs, 1.55x faster than torch (...)", against
        the faster of torch's two, or why torch was not timed."""
        t = self.torch
        if "why" in t:
            return t["why"]
        times = [f"{name} {t[key]:.2f} µs" for name, key in (("eager", "eager_us"), ("Inductor", "inductor_us"))
                 if t.get(key) is not None]
        if "inductor_error" in t:
            times.append(f"Inductor {t['inductor_error']}")
        text = ", ".join(times)
        ratio = min(t[k] for k in ("eager_us", "inductor_us") if t.get(k) is not None) / t["prism_us"]
        text += f"; Prism {t['prism_us']:.2f} µs, " + (f"{ratio:.2f}x faster than torch" if ratio >= 1 else
                                                       f"{1 / ratio:.2f}x slower than torch")
        return text + f" ({t['how']})"

    @property
    def seconds_text(self) -> str:
        """Where the tuning's seconds went: "12.3 s (workers 0.9, space 1.0, rank 3.1, compile 8.0, profile 0.2)"."""
        phases = ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items() if k != "total")
        return f"{self.seconds.get('total', 0.0):.1f} s" + (f" ({phases})" if phases else "")

    @property
    def candidate_seconds_text(self) -> str:
        """Medians of the candidates' own seconds by phase (Entry.seconds), each over the candidates that reached it:
        "compile 0.82 s (17), load 0.30 s (16), ...", or "" when none were recorded."""
        phases = dict.fromkeys(k for e in self.entries for k in e.seconds)
        parts = []
        for k in phases:
            values = [e.seconds[k] for e in self.entries if k in e.seconds]
            parts.append(f"{k} {statistics.median(values):.2f} s ({len(values)})")
        return ", ".join(parts)

    def table(self) -> str:
        """One row per candidate, best first as the tuner chose: safe ones first (prism.tune.safety), then by
        the number that decided (time, else estimate). Where outputs were tuned one at a time, each output's
        rows follow the whole program's, and the choice of all of them is named by its rows', not spelled out."""
        head = ["", "candidate", "origin", "est us", "meas us", "regs", "smem B", "safe", "status"]
        rows = []
        for i in self.order():
            e = self.entries[i]
            regs = "/".join("?" if k.get("registers") is None else str(k["registers"]) for k in e.kernels) or "-"
            smem = "/".join(str(k.get("shared", k.get("smem", "?"))) for k in e.kernels) or "-"
            label = "the outputs' chosen rows below, together" if e.origin == PER_OUTPUT else e.label
            rows.append(["*" if i == self.chosen else "", label, e.origin,
                         "-" if e.estimate_us is None else f"{e.estimate_us:.2f}",
                         "-" if e.measured_us is None else f"{e.measured_us:.2f}", regs, smem,
                         "no" if e.risk else "yes", e.fate])
        widths = [max(len(str(r[c])) for r in [head] + rows) for c in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
        lines += [fmt.format(*r) for r in rows]
        return "\n".join(line.rstrip() for line in lines)

    def order(self) -> list[int]:
        """The entries' indices, best first as the tuner chose (`table`'s rows)."""
        return sorted(range(len(self.entries)), key=self._sort_key)

    def _sort_key(self, i: int) -> tuple:
        e = self.entries[i]
        key = e.measured_us if self.method == GPU_PROFILE else e.estimate_us
        first = e.output if isinstance(e.output, int) or e.output is None else e.output[0]
        return (e.output is not None, first or 0, not e.ok, e.risk is not None, key if key is not None else
                float("inf"), i)

    def space_text(self) -> str:
        """The space's size in one line: its sGraphs, tilings and points, and of those how many were ranked (a
        large space is ranked from a sample and climbing: prism.tune.rank.climb)."""
        s = dict(self.space)
        ranked = {"tilings": s.pop("tilings_ranked", None), "points": s.pop("ranked", None)}
        return ", ".join(f"{v} {k}" + (f" ({ranked[k]} ranked)" if ranked.get(k) is not None else "")
                         for k, v in s.items())

    def forms_text(self) -> list[str]:
        """Each form's line (`forms`): its name, its sGraphs, the cost model's best point of it."""
        return [f"{name} ({f['graphs']} sGraphs) {f['estimate_us']:.2f} us {f['best']}"
                + ("" if f["safe"] else " (can overflow)") for name, f in self.forms.items()]

    def summary(self) -> str:
        lines = [f"method: {self.method_text}",
                 f"execution: {self.execution}" + (" (from the result cache)" if self.cached else "")]
        if self.best is not None:
            lines.append(f"chosen: {self.best.label} - {self.reason}")
        if self.floor_us is not None:
            lines.append(f"DRAM floor: {self.floor_us:.2f} us (bytes moved once / DRAM bandwidth)")
        if self.space:
            lines.append(f"space: {self.space_text()}")
        if self.forms:
            lines.append("forms, the cost model's best of each: " + "; ".join(self.forms_text()))
        if self.spearman is not None:
            lines.append(f"cost model vs measured: Spearman rank correlation {self.spearman:+.3f}")
        if self.torch:
            lines.append(f"against torch: {self.torch_text}")
        if self.seconds:
            lines.append(f"time: {self.seconds_text}")
        if self.candidate_seconds_text:
            lines.append(f"per candidate, medians: {self.candidate_seconds_text}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary() + "\n\n" + self.table()

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "target": self.target, "entries": [e.to_json() for e in self.entries],
                "chosen": self.chosen, "reason": self.reason, "execution": self.execution,
                "spearman": self.spearman, "space": self.space, "search": self.search, "seconds": self.seconds,
                "notes": list(self.notes), "floor_us": self.floor_us} | ({"forms": self.forms} if self.forms else {}) \
            | ({"torch": self.torch} if self.torch else {})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Report:
        return cls(d["method"], d["target"], [Entry.from_json(e) for e in d["entries"]], d.get("chosen"),
                   d.get("reason", ""), d.get("execution", ""), d.get("spearman"), dict(d.get("space", {})),
                   dict(d.get("search", {})), dict(d.get("seconds", {})), list(d.get("notes", [])),
                   d.get("floor_us"), forms=dict(d.get("forms", {})), torch=dict(d.get("torch", {})))
