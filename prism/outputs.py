"""Output files written whole or not at all: an interrupted or failed command leaves no partial file,
no mix of old and new files, and no empty folder."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from prism.errors import InputError
from prism.pool import sigint_blocked

__all__ = ["check_writable", "write_files", "write_text"]


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace the file at `path` with `text` in one step."""
    path = Path(path)
    return write_files(path.parent, {path.name: lambda p: p.write_text(text)})[path.name]


def write_files(folder: str | os.PathLike[str], writers: dict[str, Callable[[Path], object]],
                remove: Iterable[str] = ()) -> dict[str, Path]:
    """Run each writer on its file's path in a scratch folder, then move all the files into `folder`
    (made now if need be) and delete the files named in `remove` from it (an older run's, that this one
    does not make), with Ctrl-C held back. Returns the final paths by file name."""
    folder = Path(folder)
    scratch = _scratch(folder)
    try:
        for name, write in writers.items():
            write(scratch / name)
        with sigint_blocked():
            folder.mkdir(parents=True, exist_ok=True)
            for name in writers:
                os.replace(scratch / name, folder / name)
            for name in remove:
                (folder / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {name: folder / name for name in writers}


def check_writable(folder: str | os.PathLike[str]) -> None:
    """Raise InputError, naming `folder`, unless files can be written there (it is made only when they
    are): a command checks this before its work, not after it."""
    _scratch(Path(folder)).rmdir()


def _scratch(folder: Path) -> Path:
    """A new hidden folder on `folder`'s file system (in its nearest existing ancestor), where files are
    written before they move into `folder`; an InputError naming `folder` where none can be made."""
    base = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        if not base.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        return Path(tempfile.mkdtemp(prefix=".prism-", suffix=".partial", dir=base))
    except OSError as e:
        where = "" if base == folder else f"{base}: "
        raise InputError(f"{folder}: cannot write there ({where}{e.strerror or e})") from None
