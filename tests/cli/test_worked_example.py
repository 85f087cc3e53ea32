"""The worked example (docs/cli.md) as a newcomer runs it, at a small config: `prism optimize`, again from a clean
folder with the result cache warm, then `prism tune` of the saved search.json at another config and `prism
show` of one of its sGraphs. Every command exits 0, and each folder holds the files of its own run only."""

from __future__ import annotations

import shutil
from pathlib import Path

from prism.cli import EXIT_OK, main
from prism.search import SearchResult

SMALL = "n=4,d=64"
QUICK = ["--workers", "1", "--budget", "2", "-q"]
FILES = {"kernel.py", "graph.json", "graph.png", "report.json", "search.json"}


def test_the_worked_example_in_order_from_a_clean_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["optimize", "rmsnorm", "--config", SMALL, *QUICK]) == EXIT_OK
    shutil.rmtree("prism-out")
    capsys.readouterr()
    assert main(["optimize", "rmsnorm", "--config", SMALL, *QUICK]) == EXIT_OK  # the cache answers
    text = capsys.readouterr().out
    assert "search     skipped: the tuned result came from the result cache, its " in text
    out = Path("prism-out/rmsnorm-n4-d64")
    assert {p.name for p in out.iterdir()} == FILES and "search.json" in text
    saved = SearchResult.load(out / "search.json")
    assert len(saved) > 5 and saved.program.inputs[0].shape == (4, 64)

    other = Path("prism-out/rmsnorm-n8-d128")
    other.mkdir()
    (other / "search.json").write_text("an earlier run's")  # did not make the kernel tuned next: it goes
    assert main(["tune", str(out / "search.json"), "rmsnorm", "--config", "n=8,d=128", *QUICK]) == EXIT_OK
    assert {p.name for p in other.iterdir()} == FILES - {"search.json"}
    assert main(["show", str(out / "search.json"), "--index", "5", "-q"]) == EXIT_OK
    assert (out / "search-5.png").is_file()

    before = (out / "search.json").read_text()
    assert main(["tune", str(out / "search.json"), *QUICK]) == EXIT_OK  # no program: the one it was saved with
    assert sorted(p.name for p in Path("prism-out").iterdir()) == ["rmsnorm-n4-d64", "rmsnorm-n8-d128"]
    assert (out / "search.json").read_text() == before  # the file tuned stays beside what it made
