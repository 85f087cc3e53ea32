"""The result cache as the command line shows it: `prism cache` says where it and the generated modules are and
how big, `prism cache clear` empties both (and nothing else in the folder), and a damaged cache file is reported once, by the run that set it aside, not by every
later run that the fresh cache answers."""

from __future__ import annotations

import json

from prism.cli import EXIT_OK, main
from prism.runtime.cache import FILENAME, ResultCache

SMALL = "n=4,d=64"


def test_a_damaged_cache_is_reported_once(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / FILENAME).write_bytes(b"this is not a database " * 400)
    argv = ["optimize", "rmsnorm", "--config", SMALL, "--workers", "1", "--budget", "2", "--out", str(tmp_path / "o"),
            "-q"]
    assert main(argv) == EXIT_OK
    first = capsys.readouterr().out
    assert first.count("not a usable SQLite database") == 1 and "starting afresh" in first
    assert main(argv) == EXIT_OK
    again = capsys.readouterr().out
    assert "(from the result cache)" in again and "SQLite" not in again


def test_prism_cache_says_where_and_how_big_and_clears(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PRISM_CACHE_DIR", str(folder))
    assert main(["cache", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] == str(folder / FILENAME) and doc["entries"] == doc["bytes"] == 0
    assert not folder.exists()  # looking creates nothing
    store = ResultCache()
    store.put("a", {"x": 1})
    store.put("b", {"x": 2})
    (folder / f"{FILENAME}.corrupt-1").write_bytes(b"set aside by an earlier run")
    (folder / "prism_0123abcd.py").write_text("# a generated kernel module\n")
    (folder / "_prism_launcher_0123.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0" * 100)
    (folder / "notes.txt").write_text("the user's, not Prism's")
    assert main(["cache"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"results    {folder / FILENAME}: 2 entries (tuned kernels and search results), ")
    assert f"modules    {folder}: 2 generated Triton module(s) and launcher(s)" in out
    assert main(["cache", "clear"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("cleared    2 entries, 2 generated module(s)\n") and ": 0 entries" in out
    assert ": 0 generated Triton module(s)" in out
    assert len(store) == 0 and sorted(p.name for p in folder.iterdir()) == sorted([FILENAME, "notes.txt"])
