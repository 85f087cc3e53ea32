"""The environment of a test's child process (`python -m prism ...`, a user's script): this checkout first
on the import path, the caller's path kept after it (where a GPU machine's carried packages live), a
private home, and the caller's PATH."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(home: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **extra}
