"""Settings objects: a frozen dataclass of what a call may be told, instead of a dozen keyword arguments. Every
one Prism has is here; each is exported where its callers are (`prism.search.SearchOptions`,
`prism.tune.TuneOptions`, and both as `prism.SearchOptions`, `prism.TuneOptions`).

`SearchOptions`: how `prism.search.search` searches, as one value instead of thirteen keyword arguments. The
search, `join`, `superoptimize(search_options=...)` and the command line take one object (a dict of its
fields, as the backend's `Options.search` holds, is made one), so a limit added here reaches every caller, and
the result cache keys a search by it (`SearchOptions.key`).

`TuneOptions`: how `prism.tune.tune` chooses among a search's graphs; `tune`, `superoptimize` and the
benchmarks pass one object.

`RunOptions`: where and how one `superoptimize` call runs (the device, the result cache, dynamic dims, the
tuning's workers, local processes or Ray), beside its search's and tuning's options.

Each is built by `of(options, who, **changes)` from an instance, a dict of its fields, or None (the defaults),
with keyword arguments as changes, so that `search(g, time_limit=5)` and `search(g, SearchOptions(time_limit=5))`
are one call (as are `tune(result, program, budget=8)` and `tune(result, program, TuneOptions(budget=8))`); a
name that is not a field is an InputError that lists the fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, TypeVar

from prism.errors import InputError, check_positive

__all__ = ["RANK_LIMIT", "RANK_SAMPLE", "SWEEP", "RunOptions", "SearchOptions", "Settings", "TuneOptions"]

S = TypeVar("S", bound="Settings")


class Settings:
    """The base of a frozen dataclass of settings: `of` and `checked` (each subclass checks its values)."""

    WHAT: ClassVar[str] = "options"
    """What the settings are called in messages ("search options")."""

    @classmethod
    def of(cls: type[S], options: S | Mapping[str, Any] | None = None, who: str = "", **changes: Any) -> S:
        """`options` (an instance, a dict of fields, or None: the defaults) with `changes` applied, checked; an
        InputError, starting with `who`, for anything else or a name that is not a field."""
        who = who or cls.WHAT
        if options is not None and not isinstance(options, (cls, Mapping)):
            raise InputError(f"{who}: {cls.WHAT} must be a {cls.__name__} or a dict of its fields, "
                             f"got {type(options).__name__}")
        fields = dict(options) if isinstance(options, Mapping) else {}
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted((set(fields) | set(changes)) - set(names))
        if unknown:
            raise InputError(f"{who}: no {cls.WHAT[:-1] if cls.WHAT.endswith('s') else cls.WHAT} "
                             f"{', '.join(map(repr, unknown))}; they are {', '.join(names)}")
        base = options if isinstance(options, cls) else cls()
        return dataclasses.replace(base, **fields, **changes).checked(who)  # type: ignore[type-var]

    def checked(self: S, who: str) -> S:
        """These settings, or an InputError naming a value that could only do nothing (or not what was asked)."""
        return self


@dataclass(frozen=True)
class SearchOptions(Settings):
    """What a search explores, how it checks what it finds, and where its work runs.

    Limits: block ops per kernel (loaders included; None: `prism.search.generator.default_max_ops`),
        accumulators, block outputs, kernel-level ops after the fused kernel (None:
        `prism.search.generator.default_kernel_ops`), grid dims, total seconds.
    modes: imap/fmap/omap symbolic "S" or enumerated during generation "C" (ablation), e.g. "SSS";
        "mirage" also enumerates grid sizes and loop ranges (the concrete baseline, at these shapes).
    cross_check: run every verified graph at two concrete parameter choices (unsound-axiom events).
    prefilter: first run each mapping once at a small fixed size and skip the verifier for those that
        disagree (sound: a correct mapping agrees at every size); False sends every mapping to the
        verifier, as the paper does (and exposes more of the axioms to the cross-check).
    verify_timeout: seconds per verification (None: the verifier's own limit).
    workers: processes (default: all cores; 1 runs everything in this process, as does a process that
        cannot start workers, with a warning). Results are the same either way.
    backend: "local" (worker processes here) or "ray": the work runs as Ray tasks (needs
        `pip install 'prism-superopt[ray]'`), on the Ray this process has joined, else on the cluster at
        `ray_address` (as `ray.init(address=...)` takes it), else on a local Ray instance with `workers`
        CPUs, kept for later searches (prism.search.cluster).
    """

    time_limit: float = 3600.0
    max_block_ops: int | None = None
    max_accums: int = 3
    max_outputs: int = 2
    max_kernel_ops: int | None = None
    max_grid: int = 3
    modes: str = "SSS"
    cross_check: bool = True
    prefilter: bool = True
    verify_timeout: float | None = None
    workers: int | None = None
    backend: str = "local"
    ray_address: str | None = None

    WHAT: ClassVar[str] = "search options"

    def checked(self, who: str = "search") -> SearchOptions:
        """These options, or an InputError for a value that could only do nothing, or something other than
        what was asked."""
        from prism.search.cluster import check_backend

        check_positive(who, "time_limit", self.time_limit)
        for name in ("workers", "max_block_ops", "max_kernel_ops"):
            if getattr(self, name) is not None:
                check_positive(who, name, getattr(self, name), whole=True)
        if self.verify_timeout is not None:
            check_positive(who, "verify_timeout", self.verify_timeout)
        check_backend(who, self.backend, self.ray_address)
        return self

    def key(self) -> str:
        """These options as part of a cache key: the fields that change what a search finds (where its work
        ran does not), those that differ from the defaults."""
        where = {"workers", "backend", "ray_address"}
        default = SearchOptions()
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                           if f.name not in where and getattr(self, f.name) != getattr(default, f.name)},
                          sort_keys=True, default=str)


RANK_LIMIT = 4096
"""Tilings ranked by the cost model at most (each at all its launches)."""
SWEEP = 256
"""On a GPU, a space of at most this many points is timed whole (TuneOptions.sweep): a few hundred kernels compile
in parallel on the tuner's workers, and every one measured leaves nothing to the model's guess."""
RANK_SAMPLE = 512
"""A space of more tilings is ranked from a sample of about this many, stratified by sGraph, and hill climbing
from its best (prism.tune.rank.climb), up to RANK_LIMIT tilings. On the ten workloads' configs this finds the best
estimate of ranking every tiling, within 0.1% (benchmarks/rank_climb.py). A uniform sample alone does not do:
at 1024, attention's (of 8112 tilings) missed every good split-KV tiling on an H100 (the unfused program won at
108 µs where 4096 points had found 15 µs: benchmarks/results/gpu_bench_tuning_h100.json), and at 4096
QK-Attention's best estimate was 14% over the whole space's."""


@dataclass(frozen=True)
class TuneOptions(Settings):
    """What a tuning tries and spends.

    budget: candidates compiled (and on a GPU, timed) before refinement, the unfused baseline not counted.
    seed: the random draw's and the sampled ranking's.
    explore: the share of the budget drawn at random among points near the model's best.
    rank_limit: tilings ranked by the cost model at most (RANK_LIMIT).
    rank_sample: a space of more tilings is ranked from a sample of about this many and climbing (RANK_SAMPLE).
    refine: neighbours of the best tried per refinement round (default: budget // 2 on a GPU, where
        measurements steer it; 0 without one, where it would only re-rank by the model at twice the
        compile time).
    time_budget: seconds after which no more candidates are refined (None: no limit); the first batch
        (the model's best, the random draw, the baseline) is always tried whole.
    compile: compile candidates ahead of time for sm_90 (drops what fails or needs too much shared memory,
        and feeds the compiler's registers, shared memory and spills to the model); False ranks by the
        model alone, in this process or on the search's worker processes if they are running.
    target: the GPU the cost model assumes without one (a Target, or "h100" (the default), "h200").
    strides: the strides the program's inputs are passed with, one tuple per input (None: every input
        row-major). A `Linear`'s weight is read transposed (its stored [out, in] seen as [in, out]: K
        contiguous): the cost model counts each tile's contiguous runs, which set its DRAM sectors, in the
        layout the kernel will read. torch.compile's backend gives the strides of what each region reads.
    sweep: on a GPU, a space of at most this many points is measured whole (every point compiled and timed)
        instead of `budget` of it: where the space is small, measuring beats the model's guess.
    keep: points tried whatever the model and the draw pick, each (sGraph identity, candidate label): the
        fastest form ever measured for this config on this kind of GPU (prism.tune.oracle.fastest), found in
        this search by its identity (prism.search.result.SymbolicGraph.identity) and tried at its stored grid,
        loop and launch, so that a pick is never slower than it for want of a draw. Part of the result cache's
        key.
    """

    budget: int = 16
    seed: int = 0
    explore: float = 0.25
    rank_limit: int = RANK_LIMIT
    rank_sample: int = RANK_SAMPLE
    refine: int | None = None
    time_budget: float | None = None
    compile: bool = True
    target: Any = None
    strides: tuple[tuple[int, ...], ...] | None = None
    sweep: int = SWEEP
    keep: tuple[tuple[str, str], ...] = ()

    WHAT: ClassVar[str] = "tuning options"

    def checked(self, who: str = "tune") -> TuneOptions:
        check_positive(who, "budget", self.budget, whole=True)
        check_positive(who, "rank_limit", self.rank_limit, whole=True)
        check_positive(who, "rank_sample", self.rank_sample, whole=True)
        if not isinstance(self.sweep, int) or isinstance(self.sweep, bool) or self.sweep < 0:
            raise InputError(f"{who}: sweep must be a whole number of points (0: never), got {self.sweep!r}")
        if self.strides is not None:
            if not isinstance(self.strides, (tuple, list)) or not all(
                    isinstance(t, (tuple, list)) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                         for n in t) for t in self.strides):
                raise InputError(f"{who}: strides must be one tuple of non-negative ints per input, got "
                                 f"{self.strides!r}")
        for name, low, high in (("explore", 0, 1), ("time_budget", 0, math.inf), ("refine", 0, math.inf)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not low <= value <= high):
                raise InputError(f"{who}: {name} must be a number from {low} to {high}, got {value!r}")
        if not isinstance(self.keep, (tuple, list)) or not all(
                isinstance(k, (tuple, list)) and len(k) == 2 and all(isinstance(x, str) and x for x in k)
                for k in self.keep):
            raise InputError(f"{who}: keep must be pairs (sGraph identity, candidate label) of strings, got "
                             f"{self.keep!r}")
        strides = None if self.strides is None else tuple(map(tuple, self.strides))
        return dataclasses.replace(self, strides=strides, keep=tuple(map(tuple, self.keep)))


@dataclass(frozen=True)
class RunOptions(Settings):
    """Where and how one `prism.superoptimize` call runs.

    device: None (a GPU if torch sees one, else the CPU), "cuda[:i]" or "cpu".
    cache: True (the default file, prism.runtime.cache), False, a path, or a ResultCache.
    dynamic: dims whose sizes change from call to call, by name ({"kv": ["K.1", "V.1"]}); the call then returns
        a DynamicGraph (prism.runtime.buckets).
    workers: worker processes for the tuning (the search's are its options').
    backend, ray_address: "ray" runs the search (unless its options say otherwise) and the ahead-of-time
        compiles as Ray tasks, on the cluster at ray_address or a local Ray (prism.search.cluster); "local"
        (the default) in worker processes here.
    pdl: launch every kernel of the result with programmatic dependent launch (prism.ir.Launch.pdl): on sm_90
        and later each may start while the kernel before it finishes, and waits for it before it reads or
        writes. Not a tuning choice (a kernel timed alone shows nothing of it); a model's step shows it.
    """

    device: Any = None
    cache: Any = True
    dynamic: Mapping[str, Any] | None = None
    workers: int | None = None
    backend: str = "local"
    ray_address: str | None = None
    pdl: bool = False

    WHAT: ClassVar[str] = "run options"

    def checked(self, who: str = "superoptimize") -> RunOptions:
        from prism.search.cluster import check_backend

        if self.workers is not None:
            check_positive(who, "workers", self.workers, whole=True)
        check_backend(who, self.backend, self.ray_address)
        if not isinstance(self.pdl, bool):
            raise InputError(f"{who}: pdl must be True or False, got {self.pdl!r}")
        return self
