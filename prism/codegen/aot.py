"""Ahead-of-time compilation of generated kernels to PTX and cubin, with no GPU present.

`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` runs Triton's whole pipeline for an
H100 and rejects what the interpreter lets through (a `tl.dot` smaller than 16, a dtype mismatch). Shared
memory comes from Triton's metadata; registers per thread and the stack frame (non-zero when registers
spill to local memory) from the cubin's EIATTR_REGCOUNT and EIATTR_FRAME_SIZE records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping

from prism.codegen.signature import PDL
from prism.codegen.spec import KernelSpec
from prism.errors import CodegenError

__all__ = ["AotKernel", "compile_aot", "default_target", "cubin_attributes", "describe"]

_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11


def default_target() -> Any:
    """sm_90 (H100/H200), warp size 32."""
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", 90, 32)


@dataclass(frozen=True)
class AotKernel:
    """One kernel compiled ahead of time: what it needs per block, and its PTX (None once dropped: the tuner's
    worker processes send kernels back without it)."""

    name: str
    shared: int
    registers: int | None
    frame: int | None
    num_warps: int
    arch: str = ""
    ptx: str | None = None
    cubin_bytes: int = 0

    @property
    def spills(self) -> bool:
        """True if registers spill to local memory (a non-empty stack frame)."""
        return bool(self.frame)

    def to_json(self) -> dict[str, Any]:
        """What a report keeps of it: name, shared memory, registers, stack frame, warps."""
        return {"name": self.name, "shared": self.shared, "registers": self.registers, "frame": self.frame,
                "num_warps": self.num_warps}

    def __str__(self) -> str:
        regs = "?" if self.registers is None else self.registers
        frame = "?" if self.frame is None else self.frame
        return (f"{self.name} [{self.arch}]: {regs} registers/thread, {frame} B stack frame, "
                f"{self.shared} B shared memory, {self.num_warps} warps")


def compile_aot(fn: Any, spec: KernelSpec, target: Any = None, strides: Mapping[str, int] | None = None) -> AotKernel:
    """Compile the `@triton.jit` function `fn` generated for `spec` for `target` (default sm_90).

    `strides` (a stride parameter's name -> its value at launch) compiles the binary a launch with those strides
    gets: Triton specializes each integer argument that is 1 into a constant and marks pointers (16-byte aligned,
    as torch allocates) and integers divisible by 16, which is what lets it prove a tile's lanes contiguous and
    emit 16-byte loads. Without it every stride is a plain i32 (no load of a tile is known to be contiguous)."""
    import triton
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise CodegenError(f"{spec.name}: ahead-of-time compilation needs a JIT-compiled kernel; this process "
                           "runs Triton's interpreter (TRITON_INTERPRET=1), so compile in another process")
    target = default_target() if target is None else target
    src = ASTSource(fn, *_specialized(fn, spec, strides or {}))
    try:
        options: dict[str, Any] = {"num_warps": spec.num_warps}
        if PDL in spec.constexprs:    # launched as its launcher launches it (prism.ir.Launch.pdl)
            options["launch_pdl"] = True
        if spec.num_stages is not None:
            options["num_stages"] = spec.num_stages
        compiled = triton.compile(src, target=target, options=options)
    except Exception as e:  # Triton raises CompilationError, AssertionError, RuntimeError, ...
        lines = str(e).strip().splitlines() or [type(e).__name__]
        where = f" ({lines[0].rstrip(':')} of the kernel)" if len(lines) > 1 else ""  # Triton: "at L:C:", source, why
        raise CodegenError(f"{spec.name}: Triton could not compile it for {target}: {lines[-1]}{where}") from e
    return describe(compiled, spec, f"{target.backend}:{target.arch}")


def _specialized(fn: Any, spec: KernelSpec, strides: Mapping[str, int]) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of `spec` as Triton specializes a launch with `strides` (compile_aot)."""
    signature, constexprs, attrs = dict(spec.signature), dict(spec.constexprs), {}
    if not strides:
        return signature, constexprs, attrs
    unknown = set(strides) - set(signature)
    if unknown:
        raise CodegenError(f"{spec.name}: no parameter(s) {', '.join(sorted(unknown))} to specialize")
    aligned = {n for n, t in signature.items() if t.startswith("*")}
    for name, value in strides.items():
        if value == 1:
            signature[name], constexprs[name] = "constexpr", 1
        elif value % 16 == 0:
            aligned.add(name)
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return signature, constexprs, attrs


def describe(compiled: Any, spec: KernelSpec, arch: str) -> AotKernel:
    """What a kernel Triton compiled for `spec` (for `arch`, "cuda:90") needs: `compiled` is what `triton.compile`
    returns, ahead of time or for a launch (the binary specialized for the launch's arguments:
    prism.codegen.CompiledGraph.launched)."""
    cubin = compiled.asm.get("cubin", b"")
    attrs = cubin_attributes(cubin)
    regs, frame = attrs.get(_REGCOUNT), attrs.get(_FRAME_SIZE)
    return AotKernel(spec.name, int(compiled.metadata.shared), max(regs) if regs else None,
                     max(frame) if frame else None, spec.num_warps, arch, compiled.asm.get("ptx"), len(cubin))


def cubin_attributes(cubin: bytes) -> dict[int, list[int]]:
    """The per-function values (attribute -> values) of a cubin's .nv.info records of the
    (function index, u32 value) form, such as EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11)."""
    found: dict[int, list[int]] = {}
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return found
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize)

    names = header(names_at)[4]
    for i in range(count):
        h = header(i)
        start = names + h[0]
        if not cubin[start:cubin.index(b"\0", start)].startswith(b".nv.info"):
            continue
        data, p = cubin[h[4]:h[4] + h[5]], 0
        while p + 4 <= len(data):
            fmt, attr = data[p], data[p + 1]
            if fmt == 0x04:                                   # EIFMT_SVAL: u16 size, then payload
                size = struct.unpack_from("<H", data, p + 2)[0]
                if size == 8:                                 # (function index, value)
                    found.setdefault(attr, []).append(struct.unpack_from("<I", data, p + 8)[0])
                p += 4 + size
            else:                                             # NVAL/BVAL/HVAL: value inline, 4 bytes
                p += 4
    return found
