"""The runner behind a replaced cone's op: its chosen kernels, and, where they raise at run time, the cone's
program as torch ops from then on.

The backend must never break a model. Its compile-time failures leave the cone to torch
(prism.capture.backend._take). A kernel that fails at run time is different: the op is already in the
compiled graph. Examples are a launch refused by the device, or a launch specialization that a later call's
tensors break. So the op's runner falls back to `OptimizedGraph.run_program`: the program the verifier proved
equal to the chosen µGraph, as torch ops, on the same inputs. It says so once, in the log and in the cone's
`history` entry ("at run time"). A direct user of `OptimizedGraph` still gets the exception: only the
backend's ops are guarded.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

__all__ = ["Guarded"]

log = logging.getLogger("prism.compile")
_GUARDS: dict[str, Guarded] = {}


class Guarded:
    """`opt` (an OptimizedGraph) as the runner of the backend's op for one or more cones (module docstring). One
    per op (`of`): cones with the same chosen graph (every layer's attention) share an op and its runner."""

    def __init__(self, opt: Any) -> None:
        self.opt = opt
        self.failed: str | None = None
        self.records: list[dict[str, Any]] = []

    @classmethod
    def of(cls, opt: Any) -> Guarded:
        """The runner of `opt`'s op, made its runner here if it was not (taking `opt`, the latest, as runner_op
        does: graphs that share an op compute the same)."""
        guarded = _GUARDS.get(str(opt.op))
        if guarded is None:
            guarded = _GUARDS[str(opt.op)] = cls(opt)
        guarded.opt = opt
        opt.as_op(guarded)
        return guarded

    def attach(self, record: dict[str, Any]) -> None:
        """Keep `record` (a cone's history entry) told of a fall-back."""
        self.records.append(record)
        if self.failed is not None:
            record["at run time"] = self.failed

    def run_op(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if self.failed is None:
            try:
                return self.opt.run_op(tensors)
            except Exception as e:   # never the user's error: the program's torch ops compute the same
                self.failed = (f"its kernels raised {type(e).__name__}: {e}; it runs its program as torch ops "
                               "from then on")
                log.warning("prism: the op %s: %s", self.opt.op, self.failed)
                for record in self.records:
                    record["at run time"] = self.failed
        return self.opt.run_program(tensors)
