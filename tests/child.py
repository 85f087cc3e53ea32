"""The environment of a test's child process (`python -m prism ...`, a user's script): this checkout first
on the import path, the caller's path kept after it (where a GPU machine's carried packages live), a
private home, and the caller's PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(home: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **extra}


def interpreted(code: str, home: Path, *args: str, timeout: float = 900, cache: str | None = None) -> list[str]:
    """The output lines of Python `code` (given `args`) run in a child under Triton's interpreter (TRITON_INTERPRET=1
    takes effect only if set before Triton is imported: hence a child), with a private home, and a private result
    cache unless `cache` names one; a failed child fails the test with the end of its stderr."""
    env = child_env(home, TRITON_INTERPRET="1", PRISM_CACHE_DIR=cache or str(home / "cache"))
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()
