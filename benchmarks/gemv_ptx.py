"""A decode projection compiled for sm_90 without a GPU: GEMV launch against Triton's dot, tile by tile.

X [1, 2048] @ W [2048, 5632] with W in a Linear's layout (stored [5632, 2048]: K contiguous), the strides a launch
passes (prism.codegen.aot.compile_aot's `strides`). Per column tile and loop: registers, stack frame, shared
memory, the weight's global loads (the GEMV's, by width; the dot's, as copies to shared memory: of X and W) and
whether the PTX has tensor-core `mma`.

    python benchmarks/gemv_ptx.py
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout that is not installed
    sys.path.insert(0, str(ROOT))

from prism import codegen  # noqa: E402
from prism.codegen.aot import compile_aot  # noqa: E402
from prism.ir import BlockGraph, KernelGraph, Launch  # noqa: E402

K, N = 2048, 5632
STRIDES = {"stride_x0": K, "stride_x1": 1, "stride_w0": 1, "stride_w1": K, "stride_out0_0": N, "stride_out0_1": 1}


def projection(block_n: int, loop: int, gemv: bool) -> KernelGraph:
    g = KernelGraph()
    x, w = g.input((1, K), "float16", "X"), g.input((K, N), "float16", "W")
    b = BlockGraph(grid=(N // block_n,), loop=loop, launch=Launch(num_warps=4, gemv=gemv))
    b.output(b.accum(b.matmul(b.input(x, imap={}, fmap=1), b.input(w, imap={"x": 1}, fmap=0))), omap={"x": 1})
    g.output(*g.custom(b, [x, w]))
    return g


def main() -> None:
    print("| launch | grid | tile of W | registers | stack B | smem B | global loads in the PTX | mma |")
    print("|---|---|---|---|---|---|---|---|")
    for block_n, loop in ((8, 8), (16, 16), (32, 8), (64, 16)):
        for gemv in (True, False):
            cg = codegen.compile_graph(projection(block_n, loop, gemv))
            (spec,) = cg.kernels
            a = compile_aot(getattr(cg.module, spec.name), spec, strides=STRIDES)
            loads = Counter(m.split("::")[-1] for m in re.findall(r"ld\.global\.L1::evict_first\S*", a.ptx or ""))
            if not gemv:   # the dot form copies its operands to shared memory: cp.async of so many bytes
                copies = re.findall(r"cp\.async\S* \[[^]]*\], \[[^]]*\], (0x[0-9a-f]+|\d+)", a.ptx or "")
                loads = Counter(f"cp.async {int(n, 0)} B" for n in copies)
            print(f"| {'gemv' if gemv else 'dot'} | {N // block_n} | [{K // loop}, {block_n}] | {a.registers} | "
                  f"{a.frame} | {a.shared} | {dict(loads)} | {'yes' if 'mma' in (a.ptx or '') else 'no'} |")


if __name__ == "__main__":
    main()
