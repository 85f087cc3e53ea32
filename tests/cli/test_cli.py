"""The `prism` command line, run as a user runs it: each command in this process through `main(argv)`
(fast: torch is imported once), and the bad invocations in a subprocess, where a stray traceback or a
wrong exit code would show."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prism.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

from tests.child import child_env

ROOT = Path(__file__).resolve().parents[2]
SMALL = "n=4,d=64"

PROGRAM_FILE = """\
import prism

g = prism.KernelGraph()
x = g.input((4, 64), dtype="float16", name="X")
w = g.input((64, 32), dtype="float16", name="W")
g.output(g.matmul(g.silu(x), w))
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, *argv, "--json", "--quiet")
    return code, json.loads(out)


@pytest.fixture(scope="module")
def searched_swiglu(tmp_path_factory) -> Path:
    """`prism search swiglu` at a small config, saved once for the commands that read a result."""
    path = tmp_path_factory.mktemp("search") / "swiglu.json"
    assert main(["search", "swiglu", "--config", SMALL, "--workers", "1", "--out", str(path), "--quiet"]) == EXIT_OK
    return path


def test_help_explains_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for command in ("check", "optimize", "search", "tune", "show", "bench", "cache"):
        assert f"    {command}  " in text or f"    {command} " in text
    assert "exit codes" in text
    notes = {"PROGRAM is": {"optimize", "search", "tune"}, "output: results go to": {"optimize", "search", "tune"},
             "cache: tuned kernels": {"optimize", "tune", "cache"}}
    for command in ("check", "optimize", "search", "tune", "show", "bench", "cache"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "usage: prism " + command in text and "exit codes" in text
        assert {note for note, commands in notes.items() if note in text} == \
            {note for note, commands in notes.items() if command in commands}, command   # only notes that concern it


def test_check_runs_the_fused_kernels(capsys):
    code, out, _ = run(capsys, "check", "swiglu", "rmsnorm", "--config", SMALL)
    assert code == EXIT_OK
    assert "2 of 2 fused kernels match torch" in out
    code, doc = run_json(capsys, "rmsnorm", "--config", SMALL)  # a workload name alone means `check`
    assert code == EXIT_OK and doc["ok"] and doc["results"][0]["config"] == {"n": 4, "d": 64}


def test_search_saves_a_result(capsys, searched_swiglu, tmp_path):
    from prism.search import SearchResult

    result = SearchResult.load(searched_swiglu)
    assert len(result) > 0 and result.program.inputs[0].shape == (4, 64)
    code, doc = run_json(capsys, "search", "swiglu", "--config", SMALL, "--workers", "1",
                         "--out", str(tmp_path / "s.json"))
    assert code == EXIT_OK
    assert doc["graphs"] == len(result) and doc["unsound"] == 0 and doc["verified"] == len(result)
    assert Path(doc["result"]).is_file()


def test_search_a_program_file(capsys, tmp_path):
    prog = tmp_path / "silu_linear.py"
    prog.write_text(PROGRAM_FILE)
    code, doc = run_json(capsys, "search", str(prog), "--workers", "1", "--out", str(tmp_path / "r.json"))
    assert code == EXIT_OK and doc["program"] == "silu_linear" and doc["graphs"] > 0


def test_optimize_writes_kernel_picture_and_report(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "cache"))  # its first run searches, whatever ran before
    out = tmp_path / "opt"
    argv = ["optimize", "rmsnorm", "--config", SMALL, "--workers", "1", "--budget", "2", "--out", str(out)]
    code, text, err = run(capsys, *argv)
    assert code == EXIT_OK, err
    assert "search     " in text and "verified sGraphs" in text
    for name in ("kernel.py", "graph.json", "graph.png", "report.json", "search.json"):
        assert (out / name).is_file(), name
    assert (out / "graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "@triton.jit" in (out / "kernel.py").read_text()
    assert "chosen" in text and "check      chosen kernel vs the workload's torch reference" in text
    assert "(ok," in text and "picture    " in text
    assert re.search(r"torch      (not timed: no GPU|eager [0-9.]+ µs, Inductor [0-9.]+ µs; Prism [0-9.]+ µs)", text)
    assert "space      " in text and "points" in text                    # the space's size
    assert re.search(r"forms      \S+ \(\d+ sGraphs\) [0-9.]+ us #\d+ grid", text)   # each form's best point
    assert re.search(r"tuning     [0-9.]+ s \(workers [0-9.]+, space [0-9.]+, rank [0-9.]+, compile", text)
    assert "search: verify" in err  # a progress bar on stderr
    (out / "search.json").unlink()
    code, again, err = run(capsys, *argv)  # the result cache answers: no search, the same choice and files
    assert code == EXIT_OK, err
    assert "search     skipped: the tuned result came from the result cache" in again
    assert "(from the result cache)" in again and (out / "search.json").is_file()
    assert re.search(r"tuning     [0-9.]+ s \(workers [0-9.]+, space [0-9.]+, rank [0-9.]+, compile", again)
    chosen = [line for line in text.splitlines() if line.startswith("chosen")]
    assert chosen == [line for line in again.splitlines() if line.startswith("chosen")]


def test_tune_a_saved_result_at_another_config(capsys, searched_swiglu, tmp_path):
    code, doc = run_json(capsys, "tune", str(searched_swiglu), "swiglu", "--config", "n=8,d=128", "--workers", "1",
                         "--budget", "2", "--time-budget", "600", "--no-cache", "--no-torch",
                         "--out", str(tmp_path / "t"))
    assert code == EXIT_OK and "torch" not in doc["report"]
    assert doc["check"]["ok"] and doc["config"] == {"n": 8, "d": 128}
    assert {"space", "rank", "compile", "total"} <= set(doc["report"]["seconds"])
    assert doc["report"]["chosen"] is not None and Path(doc["files"]["kernel"]).is_file()


def test_tune_says_when_a_saved_result_is_from_other_code(capsys, searched_swiglu, tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(json.loads(searched_swiglu.read_text()) | {"build": "0.0.1+000000000000"}))
    code, out, _ = run(capsys, "tune", str(old), "swiglu", "--workers", "1", "--budget", "2", "--no-cache",
                       "--out", str(tmp_path / "t"))
    assert code == EXIT_OK
    assert "note       the given search result was made by Prism 0.0.1+000000000000" in out


def test_show_draws_a_search_result_and_a_graph(capsys, searched_swiglu, tmp_path):
    png = tmp_path / "one.png"
    code, out, _ = run(capsys, "show", str(searched_swiglu), "--index", "1", "--out", str(png))
    assert code == EXIT_OK and png.read_bytes()[:4] == b"\x89PNG"
    assert "sGraph grid=" in out
    code, doc = run_json(capsys, "show", str(searched_swiglu), "--sheet")
    assert code == EXIT_OK and Path(doc["picture"]).name == "swiglu-sheet.png" and Path(doc["picture"]).is_file()
    assert doc["text"].startswith("#0: sGraph grid=")
    import prism.workloads as wl

    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(wl.get("swiglu").fused({"n": 4, "d": 64}).to_json()))
    code, doc = run_json(capsys, "show", str(tmp_path))  # a folder means its graph.json
    assert code == EXIT_OK and Path(doc["picture"]) == tmp_path / "graph.png" and "custom" in doc["text"]


def test_bench_quick_writes_report_and_plots(capsys, tmp_path):
    code, doc = run_json(capsys, "bench", "--quick", "--workloads", "swiglu", "--no-gpu", "--workers", "1",
                         "--out", str(tmp_path / "b"))
    assert code == EXIT_OK
    names = {Path(p).name for p in doc["files"]}
    assert {"report.md", "search_time.png"} <= names
    assert "SwiGLU" in (tmp_path / "b" / "report.md").read_text()


def test_no_graph_found_is_exit_1(capsys, tmp_path):
    code, doc = run_json(capsys, "search", "rmsnorm", "--config", SMALL, "--workers", "1", "--max-block-ops", "3",
                         "--out", str(tmp_path / "none.json"))
    assert code == EXIT_FAILED and doc["graphs"] == 0


BAD = [
    (["optimize", "nope"], "unknown workload 'nope'"),
    (["show", "missing.json"], "missing.json: no such file"),
    (["search", "rmsnorm", "--config", "7"], "--config 7: rmsnorm has configs 0: n=8,d=4096; 1: n=8,d=1024"),
    (["search", "rmsnorm", "--config", "n=8"], "missing key(s) 'd'"),
    (["optimise", "rmsnorm"], "invalid choice: 'optimise'"),
    (["search", "broken.py"], "broken.py:2: syntax error"),
    (["search", "empty.py"], "define one module-level prism.KernelGraph"),
    (["tune", "empty.py"], "empty.py: not JSON"),
    (["search", "raises.py"], "raises.py:2: running it raised ZeroDivisionError"),
    (["optimize", "no_output.py"], "no_output.py: g: the kernel graph has no output: call g.output(tensor)"),
    (["optimize", "exits.py"], "exits.py:2: running it called sys.exit(4)"),
]


def _bad_files(where: Path) -> None:
    (where / "broken.py").write_text("import prism\ng = prism.KernelGraph(\n")
    (where / "empty.py").write_text("x = 1\n")
    (where / "raises.py").write_text("import prism\nx = 1 / 0\n")
    (where / "no_output.py").write_text("import prism\ng = prism.KernelGraph()\n")
    (where / "exits.py").write_text("import sys\nsys.exit(4)\n")


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_invocations_end_with_one_line(capsys, tmp_path, monkeypatch, argv, message):
    _bad_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors leave through exit(), as they do for a user
        code = e.code
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prism: error: ") and message in lines[0], err
    assert out == ""


@pytest.mark.parametrize("argv, message", [BAD[0], BAD[2], BAD[-1]])
def test_with_json_an_error_is_also_the_document_on_stdout(capsys, tmp_path, monkeypatch, argv, message):
    _bad_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE and err.startswith("prism: error: ") and message in err, err
    doc = json.loads(out)
    assert doc == {"error": err.strip().removeprefix("prism: error: "), "kind": "error", "exit": EXIT_USAGE}, doc


@pytest.mark.parametrize("argv, message", [BAD[0], BAD[4], BAD[-1]])
def test_bad_invocations_in_a_subprocess(tmp_path, argv, message):
    """As a user sees them: exit code 2 and one line on stderr, no traceback, nothing on stdout (a program
    file's own sys.exit included)."""
    _bad_files(tmp_path)
    env = child_env(tmp_path)
    p = subprocess.run([sys.executable, "-m", "prism", *argv], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and message in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""
