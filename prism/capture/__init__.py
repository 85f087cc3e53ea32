"""Plain torch in: `prism.from_torch` captures a function or module as a KernelGraph, and the torch.compile
backend "prism" replaces the parts of a model Prism can fuse by its verified kernels."""

from prism.capture.background import wait
from prism.capture.backend import OPTIONS, history, prism_backend, register
from prism.capture.export import Capture, capture, from_torch

__all__ = ["Capture", "OPTIONS", "capture", "from_torch", "history", "prism_backend", "register", "wait"]
