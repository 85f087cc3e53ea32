"""How a block graph's kernel is compiled (warps, pipelining stages, where it runs): a tuning choice, not
structure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prism.errors import MappingError

__all__ = ["FLAGS", "Launch", "MAX_STAGES", "MAX_WARPS"]

MAX_WARPS = 32
MAX_STAGES = 8
FLAGS = ("tail", "gemv", "pdl")
"""The Launch fields that are on or off (JSON keeps those that are on)."""


@dataclass(frozen=True)
class Launch:
    """How a block graph's kernel is compiled, never what it computes: Triton's warps per block and the
    software-pipelining depth of the loads in its loop. None leaves the choice to code generation (4 or 8
    warps from the tile sizes, `prism.codegen.emit.default_warps`) and to Triton (its default stages).

    `tail`: this kernel runs inside the kernel before it, which writes its inputs: each block of that kernel
    counts itself done on a counter of its row (the blocks that write what one block of this kernel reads),
    and the last one of a row runs this kernel's block for that row (prism.codegen.tail). One launch less
    (a split-KV combine's second kernel costs ~2-3 µs of launch in a CUDA graph); the same computation, as
    the blocks run the same µGraph. Warps and stages are then the kernel before's.

    `gemv`: each matmul is a multiply and a sum over K in registers instead of a tensor-core dot. A product
    with a few rows (decode: one token per sequence) is weight streaming: padded to the dot's 16 rows it
    computes 16x the work and the tensor cores buy nothing, while the multiply-and-sum reads the weight in
    its stored layout with wide loads. The same computation (a sum over K in another order), so the proof
    holds unchanged.

    `pdl`: programmatic dependent launch (sm_90 and later). The kernel may start while the kernel before it in
    the stream still runs: each block waits (`griddepcontrol.wait`) before it reads anything, until that kernel
    has finished and its writes are visible, and once its own loop is done it lets the kernel after it launch
    (`griddepcontrol.launch_dependents`). What overlaps is the launch and a block's set-up, never a read of
    what the kernel before writes, nor a write of what it reads (both come after the wait); a kernel launched
    without it, or on a device without it, runs as if the two instructions were not there. The same
    computation, so the proof holds unchanged; under Triton's interpreter the instructions are left out.

    It lives on the block graph so that a tuned choice travels with the graph (JSON, the result cache,
    ahead-of-time compilation) and counts in its structural hash, while the verified computation (maps,
    sizes, ops) stays exactly the same.
    """

    num_warps: int | None = None
    num_stages: int | None = None
    tail: bool = False
    gemv: bool = False
    pdl: bool = False

    def __post_init__(self) -> None:
        w, s = self.num_warps, self.num_stages
        if w is not None and (not _positive_int(w) or w & (w - 1) or w > MAX_WARPS):
            raise MappingError(f"Launch: num_warps must be a power of two from 1 to {MAX_WARPS}, got {w!r}")
        if s is not None and (not _positive_int(s) or s > MAX_STAGES):
            raise MappingError(f"Launch: num_stages must be an int from 1 to {MAX_STAGES}, got {s!r}")
        for name in FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise MappingError(f"Launch: {name} must be True or False, got {getattr(self, name)!r}")

    @property
    def default(self) -> bool:
        return self.num_warps is None and self.num_stages is None and not any(getattr(self, k) for k in FLAGS)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages))
                               if v is not None}
        return out | {k: True for k in FLAGS if getattr(self, k)}

    def __str__(self) -> str:
        flags = [k for k in FLAGS if getattr(self, k)]
        return " ".join([f"{k}={v}" for k, v in self.to_json().items() if k not in flags] + flags)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
