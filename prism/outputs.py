"""Output files written whole or not at all: an interrupted or failed command leaves no partial file,
no mix of old and new files, and no empty folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from prism.pool import sigint_blocked

__all__ = ["write_files", "write_text"]


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace the file at `path` with `text` in one step."""
    path = Path(path)
    return write_files(path.parent, {path.name: lambda p: p.write_text(text)})[path.name]


def write_files(folder: str | os.PathLike[str], writers: dict[str, Callable[[Path], object]]) -> dict[str, Path]:
    """Run each writer on its file's path in a scratch folder, then move all the files into `folder`
    (made now if need be) with Ctrl-C held back. Returns the final paths by file name."""
    folder = Path(folder)
    base = next(p for p in (folder, *folder.parents) if p.is_dir())  # the same file system as `folder`
    scratch = Path(tempfile.mkdtemp(prefix=".prism-", suffix=".partial", dir=base))
    try:
        for name, write in writers.items():
            write(scratch / name)
        with sigint_blocked():
            folder.mkdir(parents=True, exist_ok=True)
            for name in writers:
                os.replace(scratch / name, folder / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {name: folder / name for name in writers}
