"""`SearchOptions`: how `prism.search.search` searches, as one value instead of thirteen keyword arguments.

The search, `join`, `superoptimize(search_options=...)` and the command line take one object (a dict of its
fields, as the backend's `Options.search` holds, is made one), so a limit added here reaches every caller, and
the result cache keys a search by it (`SearchOptions.key`). The keyword arguments of `search(graph, time_limit=5, workers=2)` keep working: they
are changes to the options given (`SearchOptions.of`, prism.options).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from prism.errors import check_positive
from prism.options import Settings

__all__ = ["SearchOptions"]


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
