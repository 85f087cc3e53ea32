"""Prism: a symbolic superoptimizer that turns a tensor program into a proven-equal fused GPU kernel.

Names are imported on first use (torch, egglog and Triton take seconds), so `import prism` and
`prism --help` are quick.
"""

import importlib
import sys
import types
from typing import Any

from prism import errors
from prism.provenance import VERSION as __version__

__all__ = ["BlockGraph", "KernelGraph", "OptimizedGraph", "RunOptions", "SearchOptions", "SearchResult", "Tensor",
           "TuneOptions", "errors", "from_torch", "interp", "search", "superoptimize", "verify", "workloads"]

_HOME = {"BlockGraph": "prism.ir", "KernelGraph": "prism.ir", "Tensor": "prism.ir", "OptimizedGraph": "prism.runtime",
         "superoptimize": "prism.runtime", "SearchResult": "prism.search", "SearchOptions": "prism.search",
         "TuneOptions": "prism.tune", "RunOptions": "prism.options", "from_torch": "prism.capture"}
_SUBPACKAGES = ("interp", "verify", "workloads")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"prism.{name}")
    if name in _HOME:
        value = globals()[name] = getattr(importlib.import_module(_HOME[name]), name)
        return value
    raise AttributeError(f"module 'prism' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Prism(types.ModuleType):
    """`prism.search` is the search function: importing the subpackage `prism.search` would otherwise
    bind the module to that name (the subpackage stays importable as prism.search.*)."""

    @property
    def search(self) -> Any:
        from prism.search.driver import search

        return search

    @search.setter
    def search(self, subpackage: Any) -> None:
        pass


sys.modules[__name__].__class__ = _Prism

if "torch" in sys.modules:  # torch.compile(backend="prism"); without torch loaded, the entry point registers it
    importlib.import_module("prism.capture.backend").register()
