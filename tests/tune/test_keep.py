"""The never-regress rule: the fastest form ever measured for a config on a kind of GPU (prism.tune.oracle.fastest)
is among the candidates a later tuning of that config tries (TuneOptions.keep), found by its sGraph's identity in
whatever numbering the later search gives it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import prism.workloads as wl
from prism.bench.gpu import _timed_again
from prism.errors import InputError
from prism.options import TuneOptions
from prism.runtime.cache import cache_key
from prism.search import SearchResult
from prism.search.result import SymbolicGraph
from prism.tune import tune
from prism.tune.fit import Sample
from prism.tune.oracle import fastest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
H200_SEARCHES = RESULTS / "searches_h200_2026-11-27_cd"   # the searches the H200 runs c and d tuned
GROUP = "rmsnorm n=8,d=4096"


def _stored() -> Sample:
    """RMSNorm d=4096's fastest H200 kernel in the stored runs: a split-K form that one run's random draw found
    (17.43 µs) and another run's tuning never tried (it chose 21.13 µs)."""
    return fastest(sorted(RESULTS.glob("tune_samples_*.json")), "h200")[GROUP]


def _reordered(result: SearchResult, seed: int = 3) -> SearchResult:
    """The same sGraphs in another order: a later search numbers its graphs its own way."""
    graphs = list(result.graphs)
    random.Random(seed).shuffle(graphs)
    return SearchResult(result.program, graphs, result.stats, result.build)


def _tuned(result: SearchResult, **changes):
    w = wl.get("rmsnorm")
    program = w.build({"n": 8, "d": 4096}, "float16")
    return tune(result, program, budget=1, explore=0.0, compile=False, target="h200", workers=1, **changes).report


def test_the_fastest_form_ever_measured_is_among_the_candidates_a_later_tuning_tries():
    best = _stored()
    assert best.measured_us == pytest.approx(17.43, abs=0.01) and best.sgraph
    result = _reordered(SearchResult.load(H200_SEARCHES / "rmsnorm.json"))
    here = next(i for i, g in enumerate(result.graphs) if g.identity == best.sgraph)
    label = best.label.replace(best.label.split(" ")[0], f"#{here}", 1)   # the stored point, numbered as here

    alone = _tuned(result)
    assert label not in [str(e.candidate) for e in alone.entries]   # the model's one pick is another point
    kept = _tuned(result, keep=[(best.sgraph, best.label)])
    tried = {str(e.candidate): e for e in kept.entries}
    assert label in tried and tried[label].origin == "kept" and tried[label].estimate_us is not None
    assert tried[label].ok

    # what gpu_bench stores beside the row: the µs this tuning measured for the stored point (none on a CPU)
    assert _timed_again(kept, result, best) is None
    tried[label].measured_us = 17.0
    assert _timed_again(kept, result, best) == 17.0
    assert _timed_again(kept, result, replace(best, label=best.label.replace("loop=4", "loop=2"))) is None


def test_a_kept_point_the_search_lacks_is_noted_and_the_tuning_goes_on():
    best = _stored()
    result = SearchResult.load(H200_SEARCHES / "rmsnorm.json")
    report = _tuned(result, keep=[("0" * 16, best.label)])
    assert any(n.startswith(f"kept point {best.label}: no sGraph of this search is 0000") for n in report.notes)
    assert [e.origin for e in report.entries] == ["model", "baseline"] and report.chosen is not None


@pytest.mark.parametrize("keep", [[("abc",)], [("abc", "")], ["abc"], [("abc", 3)], "ab"])
def test_keep_must_be_pairs_of_strings(keep):
    with pytest.raises(InputError, match="keep must be pairs"):
        TuneOptions.of(None, "tune", keep=keep)


def test_a_kept_label_that_is_no_candidate_is_an_input_error():
    result = SearchResult.load(H200_SEARCHES / "rmsnorm.json")
    with pytest.raises(InputError, match="tune: keep: not a candidate"):
        _tuned(result, keep=[(result.graphs[0].identity, "grid(x=2) loop=1")])


def test_fastest_takes_the_fastest_named_sample_of_each_config_on_one_kind_of_gpu(tmp_path):
    def sample(group: str, us: float, sgraph: str = "") -> dict:
        return Sample(group, "#0 grid(x=1) loop=1", (), us, sgraph).to_json()

    files = {"h200_a": ("NVIDIA H200", [sample("a", 5.0, "s1"), sample("a", 3.0), sample("b", 7.0, "s2")]),
             "h200_b": ("NVIDIA H200", [sample("a", 4.0, "s3"), sample("b", 8.0, "s4")]),
             "h100_a": ("NVIDIA H100 80GB HBM3", [sample("a", 1.0, "s5")])}
    for stem, (device, samples) in files.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps({"device": device, "samples": samples}))
    best = fastest(sorted(tmp_path.glob("*.json")), "h200")
    # a's 3.0 names no sGraph (a file from before samples did) and the 1.0 is an H100's
    assert {g: (s.measured_us, s.sgraph) for g, s in best.items()} == {"a": (4.0, "s3"), "b": (7.0, "s2")}
    assert fastest(sorted(tmp_path.glob("*.json")), "h100")["a"].sgraph == "s5"


def test_an_sgraphs_identity_is_its_json_not_its_place_in_a_search():
    result = SearchResult.load(H200_SEARCHES / "rmsnorm.json")
    ids = [g.identity for g in result.graphs]
    assert len(set(ids)) == len(ids)
    assert [SymbolicGraph.from_json(g.to_json()).identity for g in result.graphs] == ids


def test_a_tuning_told_to_keep_points_is_cached_apart_from_one_that_was_not():
    plain, fields = cache_key("p", [[8]], ["float16"], "h200", "v")
    kept, kept_fields = cache_key("p", [[8]], ["float16"], "h200", "v", kept=[("s1", "#0 grid(x=1) loop=1")])
    assert plain != kept and "kept" not in fields and kept_fields["kept"] == [["s1", "#0 grid(x=1) loop=1"]]


def test_identify_names_each_stored_samples_sgraph_from_the_searches_its_run_tuned(tmp_path):
    """`tune_calibrate.py identify` gives the H200 run d's samples the identities they are stored with, and refuses
    another run's searches (an index past the search's graphs, or a point that does not instantiate) in one line."""
    stored = json.loads((RESULTS / "tune_samples_h200_d.json").read_text())
    bare = {**stored, "samples": [{k: v for k, v in s.items() if k != "sgraph"} for s in stored["samples"]]}
    path = tmp_path / "samples.json"
    path.write_text(json.dumps(bare))
    done = _identify(path, H200_SEARCHES)
    assert done.returncode == 0, done.stderr
    assert json.loads(path.read_text()) == stored
    path.write_text(json.dumps(bare))
    wrong = tmp_path / "searches"
    wrong.mkdir()
    for f in H200_SEARCHES.glob("*.json"):
        (wrong / f.name).write_text((RESULTS / "searches_h100_2026-11-26" / "rmsnorm.json").read_text())
    done = _identify(path, wrong)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "cannot be identified" in done.stderr
    assert json.loads(path.read_text()) == bare


def _identify(path: Path, searches: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tune_calibrate.py"), "identify", str(path),
                           "--search-dir", str(searches)], capture_output=True, text=True, timeout=300, cwd=ROOT)
