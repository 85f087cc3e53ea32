"""Bad input as a new user gives it: on the command line one `prism: error:` line and exit 2, through
the API a `prism.errors` exception; nothing is searched, cached answers never stand in for another
program, and a failed command leaves no output folder behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import prism
from prism.cli import EXIT_USAGE, load_program, main
from prism.errors import InputError, SerializationError

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")
SMALL = "n=4,d=64"


def _fails(capsys, *argv: str) -> str:
    """The one error line of `prism argv...`, which must exit 2 and print nothing on stdout."""
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own errors leave through exit(), as they do for a user
        code = e.code
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prism: error: "), err
    assert out == ""
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["search", "rmsnorm", "--time-limit", "-5"], "argument --time-limit: expected a positive number, got '-5'"),
    (["search", "rmsnorm", "--time-limit", "nan"], "expected a positive number, got 'nan'"),
    (["search", "rmsnorm", "--workers", "0"], "argument --workers: expected a positive whole number, got '0'"),
    (["optimize", "rmsnorm", "--budget", "0"], "argument --budget: expected a positive whole number, got '0'"),
    (["tune", "r.json", "--workers", "-1"], "argument --workers: expected a positive whole number"),
    (["tune", "r.json", "--time-budget", "0"], "argument --time-budget: expected a positive number, got '0'"),
    (["search", "rmsnorm", "--modes", "XYZ"], "argument --modes: expected three letters S (symbolic) or C"),
])
def test_nonsense_limits_and_modes_are_usage_errors(capsys, here, argv, message):
    assert message in _fails(capsys, *argv)
    assert not (here / "prism-out").exists()  # the previous output is not overwritten by an empty search


def test_a_document_without_format_names_the_file(capsys, here):
    (here / "plain.json").write_text(json.dumps({"graphs": []}))
    line = _fails(capsys, "tune", "plain.json", "rmsnorm")
    assert "plain.json: not a prism.search_result document (it has no 'format' field" in line
    assert "plain.json" in _fails(capsys, "show", "plain.json")
    with pytest.raises(SerializationError, match="plain.json: not a prism.search_result document"):
        prism.SearchResult.load(here / "plain.json")


def test_tune_refuses_another_programs_result_even_when_the_cache_has_an_answer(capsys, here, searched,
                                                                                monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(here / "cache"))
    _, cfg, rms = searched("rmsnorm")
    program = prism.workloads.get("rmsnorm").build(cfg)
    prism.superoptimize(program, search_result=rms, budget=1, compile=False)  # the cache now answers rmsnorm
    searched("swiglu")[2].save(here / "swiglu.json")
    line = _fails(capsys, "tune", "swiglu.json", "rmsnorm", "--config", SMALL, "--workers", "1")
    assert "swiglu.json: the search result was made for a different program" in line
    with pytest.raises(InputError, match="different program"):
        prism.superoptimize(program, search_result=str(here / "swiglu.json"), budget=1, compile=False)
    assert not (here / "prism-out").exists()


def test_the_search_result_tuned_is_part_of_the_cache_key(searched, tmp_path):
    _, cfg, result = searched("rmsnorm")
    program = prism.workloads.get("rmsnorm").build(cfg)
    fewer = prism.SearchResult(result.program, result.graphs[:1], result.stats)
    first = prism.superoptimize(program, search_result=result, budget=1, compile=False, cache=tmp_path)
    other = prism.superoptimize(program, search_result=fewer, budget=1, compile=False, cache=tmp_path)
    again = prism.superoptimize(program, search_result=result, budget=1, compile=False, cache=tmp_path)
    assert not first.report.cached and not other.report.cached and again.report.cached


def test_api_arguments_that_could_only_do_nothing_are_input_errors(searched):
    _, cfg, result = searched("rmsnorm")
    program = prism.workloads.get("rmsnorm").build(cfg)
    with pytest.raises(InputError, match=r"expected a KernelGraph, got str \(for a built-in workload: "
                                         r"prism.workloads.get\('rmsnorm'\).build\(config\)\)"):
        prism.search("rmsnorm")
    for kwargs, message in [({"time_limit": -5}, "time_limit must be a positive number, got -5"),
                            ({"workers": 0}, "workers must be a positive whole number, got 0"),
                            ({"modes": "XYZ"}, "modes: expected three letters")]:
        with pytest.raises(InputError, match=message):
            prism.search(program, **kwargs)
    with pytest.raises(InputError, match="budget must be a positive whole number, got 0"):
        prism.superoptimize(program, search_result=result, budget=0, cache=False)


def test_an_optimized_graph_takes_tensors_by_position_and_no_gradients(searched):
    w, cfg, result = searched("rmsnorm")
    opt = prism.superoptimize(w.build(cfg), search_result=result, budget=1, compile=False, cache=False,
                              device="cpu")
    x, weight = w.inputs(cfg, seed=0)
    with pytest.raises(InputError, match=r"takes its inputs by position \(X, W\), not by keyword \(X, W\)"):
        opt(X=x, W=weight)
    wanted = weight.clone().requires_grad_()
    with pytest.raises(InputError, match="input W requires grad, but this optimized graph is inference-only"):
        opt(x, wanted)
    with torch.no_grad():  # without autograd a tensor that requires grad is just a tensor
        (out,) = opt(x, wanted)
    assert torch.equal(out, opt(x, weight)[0])


def test_each_config_has_its_own_default_output_folder(capsys, here):
    assert load_program("rmsnorm").folder == load_program("rmsnorm", "n=8,d=4096").folder == "rmsnorm"
    assert load_program("rmsnorm", "1").folder == load_program("rmsnorm", "n=8,d=1024").folder == "rmsnorm-n8-d1024"
    for config in (SMALL, "n=4,d=128"):  # --max-block-ops 3 finds nothing, quickly, and still saves
        main(["search", "rmsnorm", "--config", config, "--workers", "1", "--max-block-ops", "3", "-q"])
    capsys.readouterr()
    assert sorted(p.name for p in (here / "prism-out").iterdir()) == ["rmsnorm-n4-d128", "rmsnorm-n4-d64"]


def test_a_failed_command_leaves_no_output_folder(capsys, here, monkeypatch):
    import prism.runtime

    def refuse(*args, **kwargs):
        raise InputError("refused")

    monkeypatch.setattr(prism.runtime, "superoptimize", refuse)
    assert main(["optimize", "rmsnorm", "--config", SMALL, "--out", "deep/er/out"]) == EXIT_USAGE
    assert capsys.readouterr().err == "prism: error: refused\n"
    assert list(here.iterdir()) == []


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process cannot write in: one made read-only, or sysfs for root (who writes anywhere)."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    yield folder
    folder.chmod(0o755)


def test_an_unwritable_out_is_refused_before_any_work(capsys, here, monkeypatch, unwritable):
    import prism.runtime

    def never(*args, **kwargs):
        raise AssertionError("searched or tuned for a folder it cannot write")

    monkeypatch.setattr(prism.runtime, "superoptimize", never)
    out = unwritable / "out"
    line = _fails(capsys, "optimize", "rmsnorm", "--config", SMALL, "--out", str(out))
    assert line.startswith(f"prism: error: {out}: cannot write there ({unwritable}: ") and ".partial" not in line
    line = _fails(capsys, "search", "rmsnorm", "--config", SMALL, "--out", str(out / "s.json"))
    assert line.startswith(f"prism: error: {out}: cannot write there (")
    (here / "a-file").write_text("")
    line = _fails(capsys, "optimize", "rmsnorm", "--config", SMALL, "--out", "a-file/out")
    assert line == "prism: error: a-file/out: cannot write there (a-file: Not a directory)"
    with pytest.raises(InputError, match=f"{out}: cannot write there"):
        prism.SearchResult(prism.KernelGraph(), [], {}).save(out / "r.json")
