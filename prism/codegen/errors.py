"""The one error code generation raises on purpose: a µGraph it cannot (yet) turn into Triton."""

from __future__ import annotations

from prism.errors import PrismError

__all__ = ["CodegenError"]


class CodegenError(PrismError):
    """A graph, or a launch of it, that code generation cannot handle; the message says which part."""
