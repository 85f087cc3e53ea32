"""What a generated kernel is, for whoever launches or compiles it; and the names and dtypes it uses."""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import Sequence

__all__ = ["COUNTER_DTYPE", "MAX_GRID_YZ", "KernelSpec", "Param", "Size", "base_name", "contiguous", "unique",
           "RESERVED", "SHORT_DTYPES", "SIGNATURE_DTYPES", "TL_DTYPES"]

TL_DTYPES = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32",
             "float64": "tl.float64"}
SIGNATURE_DTYPES = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64", "int32": "*i32"}
SHORT_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
MAX_GRID_YZ = 65535
"""CUDA's limit on the blocks along grid dims y and z of a launch (x allows 2^31 - 1)."""
COUNTER_DTYPE = "int32"
"""The dtype of the row counters by which the last block of a row is known (prism.codegen.tail, split-K)."""
RESERVED = {"tl", "triton", "i", "grid", "torch", "acc"} | {n for n in dir(builtins) if n.islower()}
"""Names a tensor's base name may not take (the generated code uses them, e.g. `range`)."""


@dataclass(frozen=True)
class Size:
    """A number a kernel takes at launch from a size known only then (a dynamic dim's extent): the size of dim
    `dim` of launcher argument `arg` (the kernel's inputs, then its outputs), divided by `per` rounded up: with
    `per` 1 the extent itself, with `per` a tile the tiles it takes (a loop's trip count, a grid dim's blocks)."""

    arg: int
    dim: int
    per: int = 1

    def of(self, shapes: Sequence[Sequence[int]]) -> int:
        """Its value for launcher arguments of `shapes`."""
        return -(-int(shapes[self.arg][self.dim]) // self.per)

    def source(self, args: Sequence[str]) -> str:
        """Its value in a launcher whose arguments are called `args`: `kt.shape[2]`, `triton.cdiv(kt.shape[2], 16)`."""
        size = f"{args[self.arg]}.shape[{self.dim}]"
        return size if self.per == 1 else f"triton.cdiv({size}, {self.per})"


@dataclass(frozen=True)
class KernelSpec:
    """A generated kernel: its source (kernel + launcher) and everything needed to launch or AOT-compile it.

    `inputs`/`outputs` are the storage dtypes of the buffers it reads and writes (in launcher order);
    `summed[k]` says output k is summed across blocks (split-K): the kernel also writes its partials and the
    row counters, which follow the outputs (prism.codegen.split).
    A kernel with runtime sizes (prism.codegen.layout) takes `runtime` i32 arguments after its strides, each
    computed at launch (`Size`), and its grid dims in `grid_sizes` have the blocks a Size gives (None: those of
    `grid`, which holds the sizes it was generated at); `out_sizes[k][d]` names the dynamic size dim d of
    output k has (None: fixed); `bounds` holds the extents a block must hold whole (a runtime size split by
    nothing), with the most each may be.
    """

    name: str
    launcher: str
    source: str
    grid: tuple[int, ...]
    signature: dict[str, str]
    constexprs: dict[str, int]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    summed: tuple[bool, ...]
    num_warps: int = 4
    num_stages: int | None = None   # None: Triton's default
    runtime: tuple[tuple[str, Size], ...] = ()
    grid_sizes: tuple[Size | None, ...] = ()
    out_sizes: tuple[tuple[str | None, ...], ...] = ()
    bounds: tuple[tuple[Size, int], ...] = ()

    def grid_at(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """The grid for launcher arguments of `shapes` (the kernel's inputs, then its outputs)."""
        sizes = self.grid_sizes or (None,) * len(self.grid)
        return tuple(g if s is None else s.of(shapes) for g, s in zip(self.grid, sizes))

    def runtime_at(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """The `runtime` arguments' values for launcher arguments of `shapes`, in parameter order."""
        return tuple(s.of(shapes) for _, s in self.runtime)


@dataclass(frozen=True)
class Param:
    """A line of a kernel's parameters: one pointer, the strides of one tensor, or one constexpr."""

    kind: str                 # "in", "out", "stride", "size" (an i32 computed at launch), "constexpr"
    names: list[str]
    types: list[str]          # the signature type of each name ("*fp16", "i32", "constexpr")
    comment: str

    @property
    def line(self) -> str:
        note = ": tl.constexpr" if self.kind == "constexpr" else ""
        return f"{', '.join(self.names)}{note},  # {self.comment}"

    def renamed(self, names: list[str], comment: str) -> Param:
        return Param(self.kind, names, self.types, comment)


def base_name(label: str, fallback: str, used: set[str]) -> str:
    """A short lowercase identifier for a tensor called `label` (`Wup` -> `wup`), unique within `used`."""
    base = re.sub(r"[^a-z0-9]", "", label.lower().split()[0]) if label.strip() else ""
    if not base or not base[0].isalpha() or keyword.iskeyword(base) or base in RESERVED \
            or re.fullmatch(r"(t|acc|out|in)\d+", base):
        base = fallback
    return unique(base, used)


def unique(want: str, used: set[str]) -> str:
    """`want`, else `want_2`, `want_3`, ...: the first name not in `used`, which it is added to."""
    out, k = want, 1
    while out in used:
        k += 1
        out = f"{want}_{k}"
    used.add(out)
    return out


def contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides, in elements, of a tensor of `shape` stored contiguously (row-major): what a launch passes for
    a buffer given no other layout."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))
