"""What a node kind asks of code generation, as a typed contract: the IR says what a node is, the pass how.

A node kind (prism.ir.kinds) hands its node to code generation in one intent-level verb: this value is an
input's tile, an op on its operands, an accumulation over the loop, a running max, a store to an output.
Which Triton that becomes (loads, masks, accumulator updates, atomics) is the emitter's alone
(prism.codegen.emit.Emitter implements `Emit`), so renaming anything inside the emitter leaves the IR as it
is, and the IR holds no Triton text but the op table's templates (prism.ir.ops).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol

if TYPE_CHECKING:
    from prism.ir.kinds import Accumulator

__all__ = ["Emit"]


class Emit(Protocol):
    """Code generation as a node kind sees it: one verb per kind of value. `i` is the node (its value is
    written where the block's schedule places it), `src` the node whose value it takes."""

    def load(self, i: int, index: int, imap: Mapping[str, int], fmap: int | None) -> None:
        """Node i is this block's tile of kernel input `index`: grid dims in `imap` pick its place along
        their dims, the loop walks dim `fmap` (None: the same tile in every iteration)."""

    def op(self, i: int) -> None:
        """Node i is its table op (prism.ir.ops) on its operands' values."""

    def accumulate(self, i: int, src: int, kind: Accumulator, running: int | None = None) -> None:
        """Node i combines node src's tile of every iteration with accumulator `kind` (its combine op, from
        its identity); with `running` (a running max node), the value so far is first rescaled as that max
        grows."""

    def running_max(self, i: int, src: int) -> None:
        """Node i is the max of node src's tiles over the iterations so far; the online accumulators bound to
        it rescale by how much it grew."""

    def store(self, i: int, src: int, index: int, omap: Mapping[str, int]) -> None:
        """Node i writes node src's final value to kernel output `index`: grid dims in `omap` place the tile
        along their dims, blocks of the others add their tiles."""
