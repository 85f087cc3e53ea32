"""Which build of Prism produced something: the version plus a digest of the package's own source.

Saved search results and the result cache outlive the code that made them. A result searched before a
change to the search (a new axiom, a new form such as safe split-KV) is still correct, since every graph
in it was verified, but it lacks what the new code finds; a cached kernel chosen by an older tuner or cost
model is an older answer. The version alone does not tell them apart during development, so both carry
`build_id()`, and a mismatch means "made by other code": the cache misses, and a loaded search result says
it is stale (`SearchResult.stale`).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["VERSION", "build_id"]

VERSION = "0.1.0"
"""Prism's version (`prism.__version__`; pyproject.toml states the same for packaging)."""

PACKAGE = Path(__file__).resolve().parent


@functools.cache
def build_id() -> str:
    """'<version>+<12 hex digits>': the digest hashes the package's source and data (each .py and .json
    file's path and bytes; the shipped cost-model calibration is one)."""
    h = hashlib.sha256()
    for path in sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".json")):
        h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{VERSION}+{h.hexdigest()[:12]}"
