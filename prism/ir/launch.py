"""How a block graph's kernel is compiled (warps, pipelining stages): a tuning choice, not structure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prism.errors import MappingError

__all__ = ["Launch", "MAX_STAGES", "MAX_WARPS"]

MAX_WARPS = 32
MAX_STAGES = 8


@dataclass(frozen=True)
class Launch:
    """How a block graph's kernel is compiled, never what it computes: Triton's warps per block and the
    software-pipelining depth of the loads in its loop. None leaves the choice to code generation (4 or 8
    warps from the tile sizes, `prism.codegen.emit.default_warps`) and to Triton (its default stages).

    It lives on the block graph so that a tuned choice travels with the graph (JSON, the result cache,
    ahead-of-time compilation) and counts in its structural hash, while the verified computation (maps,
    sizes, ops) stays exactly the same.
    """

    num_warps: int | None = None
    num_stages: int | None = None

    def __post_init__(self) -> None:
        w, s = self.num_warps, self.num_stages
        if w is not None and (not _positive_int(w) or w & (w - 1) or w > MAX_WARPS):
            raise MappingError(f"Launch: num_warps must be a power of two from 1 to {MAX_WARPS}, got {w!r}")
        if s is not None and (not _positive_int(s) or s > MAX_STAGES):
            raise MappingError(f"Launch: num_stages must be an int from 1 to {MAX_STAGES}, got {s!r}")

    @property
    def default(self) -> bool:
        return self.num_warps is None and self.num_stages is None

    def to_json(self) -> dict[str, int]:
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages)) if v is not None}

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.to_json().items())


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
