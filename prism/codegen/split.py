"""Split-K in one launch: an output summed across blocks is combined by the last block of each output tile.

A grid dim of size > 1 that an output leaves unmapped sums the blocks along it (prism.ir.block: split-K, a
sum of squares split over the columns). Such a kernel is generated as

    every block, as before, up to its tile t of output k   the µGraph's block, unchanged
    part_k[s, tile] = t                                     its slot s: its index along the split dims
    tl.debug_barrier()                                      ... all of its threads have stored their partials
    done = atomic_add(count[row], 1)                        acq_rel, gpu scope: the row is the output tile
    if done == S - 1:                                         (the blocks along the other grid dims)
        out_k[tile] = part_k[0, tile] + ... + part_k[S-1, tile]   in slot order, in float32, then its dtype
        count[row] = 0                                      back to 0 for the next launch

Why this is the sum. The S blocks of a row are exactly the blocks that the saver sums into one tile (they
differ only along the split dims, which the output does not map), and each stores its whole tile in a slot
of its own before it counts itself done, so no partial is overwritten or lost. The counter's atomic is an
acquire-release at GPU scope behind a barrier (the ordering prism.codegen.tail uses: store; barrier; one
release by one thread | one acquire by one thread; load): the block that sees S - 1 blocks before it sees
every partial they stored, and it reads them past L1 (`.cg`). Exactly one block per row sees S - 1, so the
output tile is written once, and the counter is zero again when the launch ends, as a persistent buffer
must be (prism.codegen.plan). An output the blocks along other dims write once (`once`) is stored and combined
by the first block along those dims only: every block along them holds the same tile (nothing they split
reaches it), so the guard saves stores; it is not what makes the sum right.

Why it is the same every run. The sum runs in slot order, whichever block arrives last, so the output is a
fixed function of the partials, and each partial is a fixed function of its block's inputs: the output is
bit-identical from run to run, which atomic adds in arrival order are not. Nothing needs zeroing before the
launch and no cast kernel follows it (the last block rounds to the output's dtype).

Masks: a partial tile is stored and read with the output tile's mask, so a padded lane is neither written
nor summed. Tests break each rule (a slot dropped from the sum, a counter not reset, a partial stored in
another block's slot) and see the mutants caught (tests/codegen/test_split.py).
"""

from __future__ import annotations

import math

from prism.ir.block import BlockGraph

__all__ = ["SPLIT_K", "rows", "slots", "splits"]

SPLIT_K = "combined"
"""How this build sums blocks (a GPU run records it, prism.bench.gpu): "combined", in their launch. A run that
records nothing summed them with atomic adds into a zeroed buffer, then a cast kernel: the kernels it timed for a
split-K candidate are not the ones this build generates (benchmarks/tune_calibrate.py from-bench skips them)."""


def splits(block: BlockGraph) -> dict[tuple[str, ...], list[int]]:
    """The summed outputs of `block` by the grid dims they sum over (their split), in output order: the outputs of
    one split share its row counters (one atomic per block counts the blocks of every output of the split)."""
    out: dict[tuple[str, ...], list[int]] = {}
    for k in range(len(block.savers)):
        if block.summed(k):
            out.setdefault(block.summed(k), []).append(k)
    return out


def slots(block: BlockGraph, split: tuple[str, ...]) -> int:
    """Blocks along the dims of `split`: the partial tiles of one output tile."""
    return math.prod(block.grid_size(g) for g in split)


def rows(block: BlockGraph, split: tuple[str, ...]) -> int:
    """Output tiles `split` is combined into, one counter each: the blocks over those of one tile."""
    return math.prod(block.grid) // slots(block, split)
