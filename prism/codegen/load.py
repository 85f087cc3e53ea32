"""Generated source → an imported Python module (`@triton.jit` reads its kernels from a real file).

Files go to `$PRISM_CACHE_DIR` (default `~/.cache/prism/triton`), named by a hash of the source, and are
written atomically so that concurrent processes can share the directory. Whether kernels run under
Triton's interpreter is fixed when Triton is first imported (`TRITON_INTERPRET=1`), not here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["cache_dir", "generated_files", "load_module", "interpreting", "write_module"]

GENERATED = ("prism_*.py", "_prism_launcher_*")
"""What Prism writes to `cache_dir()`: each kernel module (`load_module`) and the compiled C launcher
(prism.codegen.native); nothing else there is Prism's (with $PRISM_CACHE_DIR the result cache sits beside them)."""


def cache_dir() -> Path:
    """Where generated modules are written."""
    root = os.environ.get("PRISM_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "prism" / "triton"


def generated_files() -> list[Path]:
    """Every file of `GENERATED` in `cache_dir()`: what `prism cache clear` deletes."""
    folder = cache_dir()
    return sorted(p for pattern in GENERATED for p in folder.glob(pattern) if p.is_file())


def interpreting() -> bool:
    """True if this process runs Triton kernels in the interpreter (on CPU tensors)."""
    import triton

    return bool(triton.knobs.runtime.interpret)


def write_module(source: str, digest: str) -> Path:
    """`<cache>/prism_<digest>.py` holding `source`, written (whole, atomically) unless it already does."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"prism_{digest}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".prism_{digest}.", suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


def load_module(source: str, digest: str) -> ModuleType:
    """Write `source` to `<cache>/prism_<digest>.py` (once) and import it (once per process and mode)."""
    name = f"prism_generated_{digest}{'_interp' if interpreting() else ''}"
    if name in sys.modules:
        return sys.modules[name]
    path = write_module(source, digest)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
