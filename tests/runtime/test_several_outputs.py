"""superoptimize on a program with several outputs: each output's part is searched, proven and tuned on its
own, the chosen kernels joined into one graph; its report, cache, numeric check and command line."""

from __future__ import annotations

import pytest
import torch

from prism import interp
from prism.cli import EXIT_OK, main
from prism.errors import InputError
from prism.runtime import superoptimize
from prism.search import SearchResult, search
from prism.tune.cost import estimate
from prism.tune.report import Report
from prism.tune.target import get_target
from tests.ir.test_cones import residual_and_projection

pytestmark = pytest.mark.filterwarnings("ignore:prism. no GPU:RuntimeWarning")
QUICK = {"workers": 1, "max_block_ops": 10, "max_grid": 2}

PROGRAM = """
from prism import KernelGraph
g = KernelGraph()
x, r, w = g.input((4, 64), "float16", "X"), g.input((4, 64), "float16", "R"), g.input((64, 32), "float16", "W")
h = g.add(x, r)
g.output(g.matmul(g.rms_norm(h, 1e-6), w), h)
"""


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    g = residual_and_projection()
    return g, cache, superoptimize(g, budget=2, compile=False, cache=cache, device="cpu", search_options=QUICK)


def test_every_output_is_right_and_fused(optimized):
    g, _, opt = optimized
    assert len(opt.graph.output_tensors) == 2 and len(opt.graph.blocks) >= 2       # a fused kernel per output
    xs = [torch.rand(t.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float32) + 0.5
          for t in g.inputs]
    for got, want in zip(opt(*xs), interp.run(g, xs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    check = opt.check()
    assert check["ok"] and check["against"] == "the reference executor"


def test_the_report_joins_the_parts(optimized):
    _, _, opt = optimized
    r = opt.report
    best = r.best
    assert best.origin == "per output" and best.label.startswith("output 0: ") and " + output 1: " in best.label
    parts = [e for e in r.entries if e.output is not None]
    chosen = [e for e in parts if e.status == "chosen"]
    assert [e.output for e in chosen] == [0, 1]
    assert best.estimate_us == pytest.approx(sum(e.estimate_us for e in chosen))
    base = next(e for e in r.entries if e.origin == "baseline")
    assert base.output is None and base.label == "unfused program"
    parts_unfused = sum(e.estimate_us for e in parts if e.origin == "baseline")
    assert base.estimate_us == pytest.approx(estimate(opt.program, get_target()).seconds * 1e6)
    assert base.estimate_us < parts_unfused   # the whole program unfused computes X + R once, its parts twice
    assert r.reason.startswith("each output tuned as a program of its own: output 0: ")
    assert r.search["source"] == "per output" and [p["graphs"] > 0 for p in r.search["parts"]] == [True, True]
    assert r.space["outputs"] == 2 and r.floor_us is None
    again = Report.from_json(r.to_json())
    assert [e.label for e in again.entries] == [e.label for e in r.entries] and again.best.label == best.label
    rows = r.table().splitlines()[2:]  # the whole program's rows, then output 0's, then output 1's
    assert rows[0].startswith("*  the outputs' chosen rows below, together") and "unfused program" in rows[1]
    firsts = [next(i for i, row in enumerate(rows) if f"output {k}: " in row) for k in (0, 1)]
    assert all(f"output {k}: " in row for k, start in enumerate(firsts) for row in rows[start:][:2])
    assert firsts[0] == 2 and all("output 1: " in row for row in rows[firsts[1]:])
    widest = max(len(e.label) for e in r.entries if e is not best)  # the joined label, all parts', is not shown
    assert r.table().splitlines()[0].index("origin") == len("*  ") + widest + len("  ")


def test_the_cache_answers_each_output(optimized):
    g, cache, opt = optimized
    again = superoptimize(g, budget=2, compile=False, cache=cache, device="cpu", search_options=QUICK)
    assert again.report.cached and again.report.best.label == opt.report.best.label
    assert again.graph.to_json() == opt.graph.to_json()


def test_a_joint_search_result_tunes_one_kernel_for_every_output(optimized):
    """`search` on a program with several outputs gives its joint forms; superoptimize tunes one of them: the
    norm's projection and the residual it normalizes, written by one kernel."""
    g, _, _ = optimized
    result = search(g, **QUICK)
    opt = superoptimize(g, search_result=result, budget=2, compile=False, cache=False, device="cpu")
    assert opt.launches == 1 and opt.check()["ok"]
    empty = SearchResult(g, [], result.stats)
    with pytest.raises(InputError, match="no joint form"):
        superoptimize(g, search_result=empty, cache=False, device="cpu")


def test_the_command_line_optimizes_and_searches_several_outputs(capsys, tmp_path):
    prog = tmp_path / "residual.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "o"
    code = main(["optimize", str(prog), "--workers", "1", "--budget", "2", "--max-block-ops", "10", "--out", str(out),
                 "-q"])
    text = capsys.readouterr().out
    assert code == EXIT_OK
    assert "search     per output: output 0: " in text and "; output 1: " in text
    assert "chosen     output 0: " in text and "check      chosen kernel vs the reference executor" in text
    assert "(ok," in text and (out / "kernel.py").is_file()
    # searched jointly: the residual and the projection of its norm in one kernel (prism.search.joint)
    saved = tmp_path / "joint.json"
    assert main(["search", str(prog), "--workers", "1", "--max-block-ops", "10", "--out", str(saved), "-q"]) == EXIT_OK
    result = SearchResult.load(saved)
    assert result.graphs and all(len(result.instantiate(i).outputs) == 2 for i in range(len(result.graphs)))


def test_the_example_program_splits_into_its_four_outputs():
    """examples/norm_qkv.py: the residual, then Q, K and V of its norm; each cone reads only what it needs."""
    from pathlib import Path

    from prism.cli import load_program

    g = load_program(str(Path(__file__).resolve().parents[2] / "examples" / "norm_qkv.py")).graph
    cones = [g.output_cone(k) for k in range(len(g.outputs))]
    assert [[g.inputs[j].name for j in used] for _, used in cones] == [
        ["X", "R"], ["X", "R", "Wq"], ["X", "R", "Wk"], ["X", "R", "Wv"]]
    assert [[n.op for n in c.nodes if n.op != "input"] for c, _ in cones] == [
        ["add"]] + [["add", "rms_norm", "matmul"]] * 3
