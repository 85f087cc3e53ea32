"""The C launcher (launcher.c beside this file), built once per machine: one call from Python launches
every kernel of a bound graph, where Triton's own launch path costs several µs of Python per kernel.

It is compiled like Triton compiles its launchers (the C compiler, Python's headers, the `cuda.h` Triton
ships), into the cache folder (`prism.codegen.load.cache_dir`), named by a hash of what went in. Where it
cannot be built (no compiler, no headers), `load()` returns None, says why in `why_not()`, and bound
graphs launch through Triton's compiled kernels instead: slower, never wrong.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from prism.codegen.load import cache_dir

__all__ = ["load", "why_not", "SOURCE"]

SOURCE = Path(__file__).with_name("launcher.c")
_MODULE = "_prism_launcher"
_state: dict[str, object] = {}


def _includes() -> list[str]:
    import triton

    return [sysconfig.get_paths()["include"], str(Path(triton.__file__).parent / "backends" / "nvidia" / "include")]


def _build() -> ModuleType:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc, or $CC)")
    includes = _includes()
    for folder, header in zip(includes, ("Python.h", "cuda.h")):
        if not (Path(folder) / header).is_file():
            raise RuntimeError(f"{header} not found in {folder}")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256("\n".join([SOURCE.read_text(), cc, suffix, *includes]).encode()).hexdigest()[:16]
    folder = cache_dir()
    path = folder / f"{_MODULE}_{key}{suffix}"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{_MODULE}_", suffix=suffix)
        os.close(fd)
        cmd = [cc, str(SOURCE), "-O2", "-shared", "-fPIC", "-o", tmp, *(f"-I{d}" for d in includes), "-ldl"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            os.unlink(tmp)
            raise RuntimeError(f"compiling {SOURCE.name} failed: {done.stderr.strip()[-500:]}")
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The compiled launcher module (built on first use), or None if it cannot be built here."""
    if "module" not in _state:
        try:
            _state["module"] = _build()
        except Exception as e:  # a missing toolchain is a slower path, not an error
            _state["module"], _state["why"] = None, f"{type(e).__name__}: {e}"
    return _state["module"]  # type: ignore[return-value]


def why_not() -> str | None:
    """Why `load()` returned None, or None if it did not."""
    load()
    return _state.get("why")  # type: ignore[return-value]
