"""The on-disk result cache: one SQLite file of superoptimization results, safe to share and to corrupt.

A row is keyed by (program structural hash, input shapes, dtypes, target, Prism version, and the
hash of the search result tuned when one was given), hashed to one hex key, and holds a JSON payload
with its length and sha256. A read returns the payload only if the row is whole: the length and
checksum match, the JSON parses, and the caller's `validate` accepts it (e.g. the stored graph still
loads). Anything else is discarded and reported as a miss, so a corrupt or partial entry is
recomputed, never returned. A file that is not a SQLite database at all is moved aside
(`*.corrupt-<time>`) and a fresh one started. Connections are short-lived, so several processes may
share the file.

Location: the `path` argument, else `$PRISM_CACHE_DIR/results.sqlite`, else
`$XDG_CACHE_HOME/prism/results.sqlite` (default `~/.cache/prism/results.sqlite`). `prism cache` says
where and how big, `prism cache clear` empties it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["FILENAME", "ResultCache", "cache_key", "default_path"]

FILENAME = "results.sqlite"
_SCHEMA = """CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    fields TEXT NOT NULL,
    payload TEXT NOT NULL,
    length INTEGER NOT NULL,
    checksum TEXT NOT NULL,
    created REAL NOT NULL
)"""


def default_path() -> Path:
    root = os.environ.get("PRISM_CACHE_DIR")
    if root:
        return Path(root) / FILENAME
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "prism" / FILENAME


def cache_key(structural_hash: str, shapes: Sequence[Sequence[int]], dtypes: Sequence[str], target: str,
              version: str, search: str | None = None,
              strides: Sequence[Sequence[int]] | None = None,
              kept: Sequence[Sequence[str]] = ()) -> tuple[str, dict[str, Any]]:
    """(hex key, the fields it hashes) for one program, its input shapes and dtypes, target and version,
    the search it was tuned from (`search`: a given search result's identity, or the search's options), the
    strides its inputs are passed with where given (a kernel is tuned for the layout it reads), and the points the
    tuning was told to try where there are any (TuneOptions.keep: a tuning without them may have chosen a slower
    form)."""
    fields = {"program": structural_hash, "shapes": [list(s) for s in shapes], "dtypes": list(dtypes),
              "target": target, "version": version} | ({} if search is None else {"search": search})
    fields |= {} if strides is None else {"strides": [list(s) for s in strides]}
    fields |= {"kept": [list(k) for k in kept]} if kept else {}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), fields


def _checksum(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


class ResultCache:
    """get/put JSON payloads by key; `events` lists what was discarded and why (newest last)."""

    def __init__(self, path: str | Path | None = None) -> None:
        p = Path(path) if path is not None else default_path()
        self.path = p / FILENAME if p.is_dir() else p
        self.events: list[str] = []
        self.hits = self.misses = self.discarded = 0

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=30)
        try:
            con.execute(_SCHEMA)
            con.commit()
        except sqlite3.DatabaseError:
            con.close()
            raise
        return con

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `fn` on a connection; a file that is not a database is moved aside and replaced once."""
        for attempt in (0, 1):
            try:
                con = self._connect()
                try:
                    with con:
                        return fn(con)
                finally:
                    con.close()
            except sqlite3.DatabaseError as e:
                corrupt = any(s in str(e) for s in ("not a database", "malformed", "encrypted"))
                if attempt or not corrupt:
                    raise
                self._quarantine(e)
        return None

    def _quarantine(self, error: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time() * 1000)}")
        try:
            os.replace(self.path, aside)
            where = f"moved to {aside.name}"
        except OSError:
            where = "could not be moved"
        for suffix in ("-wal", "-shm", "-journal"):
            try:
                os.remove(f"{self.path}{suffix}")
            except OSError:
                pass
        self.discarded += 1
        self.events.append(f"{self.path.name} is not a usable SQLite database ({error}); {where}, starting afresh")

    # -- reading and writing ---------------------------------------------------------------------

    def get(self, key: str, validate: Callable[[Any], Any] | None = None) -> Any:
        """The payload stored under `key` (or `validate(payload)`'s result), or None; a row that is
        truncated, fails its checksum, is not JSON, or that `validate` rejects (raises) is deleted."""
        row = self._run(lambda con: con.execute(
            "SELECT payload, length, checksum FROM results WHERE key = ?", (key,)).fetchone())
        if row is None:
            self.misses += 1
            return None
        payload, length, checksum = row
        problem = None
        value: Any = None
        if not isinstance(payload, str) or not isinstance(length, int) or len(payload) != length:
            problem = "truncated or malformed row"
        elif checksum != _checksum(payload):
            problem = "checksum mismatch"
        else:
            try:
                value = json.loads(payload)
            except ValueError as e:
                problem = f"payload is not JSON ({e})"
        if problem is None and validate is not None:
            try:
                value = validate(value)
            except Exception as e:  # whatever no longer loads is stale or corrupt: recompute it
                problem = f"payload rejected ({type(e).__name__}: {e})"
        if problem is not None:
            self.discard(key, problem)
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, payload: Any, fields: dict[str, Any] | None = None) -> None:
        text = json.dumps(payload, allow_nan=False)  # keys in their order: a report's phases stay in theirs
        self._run(lambda con: con.execute(
            "INSERT OR REPLACE INTO results (key, fields, payload, length, checksum, created) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (key, json.dumps(fields or {}, sort_keys=True), text, len(text), _checksum(text), time.time())))

    def discard(self, key: str, why: str) -> None:
        self._run(lambda con: con.execute("DELETE FROM results WHERE key = ?", (key,)))
        self.discarded += 1
        self.events.append(f"discarded entry {key[:12]}: {why}")

    def keys(self) -> list[str]:
        return [r[0] for r in self._run(lambda con: con.execute("SELECT key FROM results").fetchall())]

    def clear(self) -> int:
        """Delete every entry, give their space back, and delete the corrupt files set aside beside the
        database; returns how many entries there were."""
        count = self._run(lambda con: con.execute("DELETE FROM results").rowcount)
        self._run(lambda con: con.execute("VACUUM"))
        for p in self.path.parent.glob(f"{self.path.name}.corrupt-*"):
            p.unlink(missing_ok=True)
        return count

    def files(self) -> list[Path]:
        """The cache's files on disk: the database, its journals, and corrupt ones set aside."""
        own = [Path(f"{self.path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]
        return [p for p in own if p.is_file()] + sorted(self.path.parent.glob(f"{self.path.name}.corrupt-*"))

    def __len__(self) -> int:
        return self._run(lambda con: con.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def __repr__(self) -> str:
        return f"ResultCache({str(self.path)!r})"
