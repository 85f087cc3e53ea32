"""What a node kind asks of each pass, as typed contracts: the IR says what a node is, the pass how.

A node kind (prism.ir.kinds) hands its node to code generation in one intent-level verb: this value is an
input's tile, an op on its operands, an accumulation over the loop, a running max, a store to an output.
Which Triton that becomes (loads, masks, accumulator updates, atomics) is the emitter's alone
(prism.codegen.emit.Emitter implements `Emit`), so renaming anything inside the emitter leaves the IR as it
is, and the IR holds no Triton text but the op table's templates (prism.ir.ops).

The other passes are contracts of the same kind, each the few members the kinds use: the executor's block
run (`Execute`, prism.interp.executor), the verification encoder's (`Encode`, prism.verify.encode) and the
cost model's count of one block's work (`Count`, prism.tune.cost). Where a kind needs the pass's own
bookkeeping (tile slices, dtypes, replication), it asks in one verb and the pass works it out, so a pass can
change how it keeps its state without touching the IR.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from prism.ir.kinds import Accumulator
    from prism.verify.expr import Term

__all__ = ["Emit", "Execute", "Encode", "Count"]


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
        along their dims; of the others, those the output writes once (BlockGraph.once) take the first block's
        tile, and the blocks of the rest add their tiles (BlockGraph.summed)."""


class Execute(Protocol):
    """The reference executor's run of one block, as a node kind sees it: the node values so far (`env`, by
    node; None for an accumulator before its first step), what a node carries from one iteration to the next
    (`carry`: a running max keeps its value under its node and its value before this iteration under
    ("before", node)), and the block's own tiles of the kernel's inputs and outputs."""

    env: dict[int, torch.Tensor | None]
    carry: dict[Any, torch.Tensor]

    def load(self, i: int, index: int, imap: Mapping[str, int], fmap: int | None) -> None:
        """Node i's value is this block's tile, this iteration, of kernel input `index`: grid dims in `imap`
        pick its place along their dims, the loop walks dim `fmap`."""

    def store(self, src: int, index: int, omap: Mapping[str, int], once: Sequence[str]) -> None:
        """Add node src's value into this block's tile of kernel output `index` (grid dims in `omap` place it),
        unless this block is not the first along a grid dim in `once`."""


class Encode(Protocol):
    """The verification encoder, as a node kind sees it: the node terms so far (`env`, by node), each grid
    dim's parallel dim (`pdims`), the loop's (`loop`; None: no loop), and the term constructors."""

    env: dict[int, Term]
    pdims: dict[str, str]
    loop: str | None

    def term(self, op: str, *args: Term, attrs: tuple[Any, ...] = ()) -> Term:
        """Term `op` on `args` (prism.verify.expr)."""

    def axis(self, t: Term, d: int) -> int:
        """The term axis of IR dim `d` of `t`."""

    def apply(self, op: str, args: list[Term], attrs: Mapping[str, Any]) -> Term:
        """Table op `op` on term operands."""

    def input(self, k: int) -> Term:
        """Kernel input k's term."""

    def looped(self, ref: tuple[int, int]) -> Term:
        """Node ref's term as a loop value (a loop-invariant one replicated over the loop)."""

    def operand(self, i: int, ref: tuple[int, int]) -> Term:
        """Operand `ref` of node i, on node i's side of the loop."""

    def output(self, k: int, t: Term) -> None:
        """Kernel output k is term t."""


class Count(Protocol):
    """The cost model's count of one block's work (bytes, FLOPs, live registers), as a node kind sees it."""

    def read(self, i: int, index: int, imap: Mapping[str, int]) -> None:
        """Loader i reads its tile of kernel input `index`; blocks along grid dims not in `imap` read the same
        tile."""

    def compute(self, i: int, node: Any) -> None:
        """Node i is a table op on its operands."""

    def hold(self, i: int) -> None:
        """Node i's tile stays in registers across the loop (an accumulator, a running max)."""

    def write(self, i: int, src: int, index: int) -> None:
        """Saver i writes node src's tile to kernel output `index`."""
