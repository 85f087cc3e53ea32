"""The runtime: `superoptimize`, the OptimizedGraph it returns, and the on-disk result cache."""

from prism.runtime.cache import ResultCache, default_path
from prism.runtime.optimized import OptimizedGraph
from prism.runtime.pipeline import superoptimize

__all__ = ["OptimizedGraph", "ResultCache", "default_path", "superoptimize"]
