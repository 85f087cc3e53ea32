"""The cost model replayed over candidates measured on GPUs (prism.tune.oracle): per stored config, the
measured µs of the model's pick over the fastest measured. The goal (issue 36) is at most 1.10 everywhere;
the bounds below are today's picks, so a change to the cost model or its calibration that picks a slower
measured kernel anywhere fails here, and one that meets the goal lowers them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from prism.errors import InputError
from prism.tune.fit import Sample
from prism.tune.oracle import load, regrets
from prism.tune.target import H100, get_target

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RUN = RESULTS / "gpu_bench_h100_2026-11-26.json"
RUN_SEARCHES = RESULTS / "searches_h100_2026-11-26"
H100_TODAY = {  # the regret of today's pick per config (a config measured in several files: one group per file).
    # Files a-d: 2026-11-25/26 (collect, and the tuner's own timed candidates in gpu_bench runs); e, f: the two
    # gpu_bench runs of 2026-11-26, session 7. Calibration: fitted on all six (prism/tune/data/h100.json).
    "rmsnorm n=8,d=4096 [tune_samples_h100_a]": 1.000, "rmsnorm n=8,d=1024 [tune_samples_h100_a]": 1.552,
    "rmsnorm_mlp n=8,d=1024 [tune_samples_h100_a]": 1.071, "rmsnorm_mlp n=16,d=1024 [tune_samples_h100_a]": 1.076,
    "swiglu n=8,d=1024 [tune_samples_h100_a]": 1.116, "swiglu n=8,d=4096 [tune_samples_h100_a]": 1.004,
    "attention b=2,g=8,h=8192,d=128 [tune_samples_h100_b]": 1.000,
    "attention b=2,g=8,h=16384,d=128 [tune_samples_h100_b]": 1.440,
    "rmsnorm n=8,d=4096 [tune_samples_h100_c]": 1.130, "rmsnorm n=8,d=1024 [tune_samples_h100_c]": 2.248,
    "rmsnorm_mlp n=8,d=1024 [tune_samples_h100_c]": 1.197, "rmsnorm n=8,d=4096 [tune_samples_h100_d]": 1.442,
    "rmsnorm n=8,d=1024 [tune_samples_h100_d]": 2.002, "rmsnorm_mlp n=8,d=1024 [tune_samples_h100_d]": 1.824,
    "rmsnorm_mlp n=16,d=1024 [tune_samples_h100_d]": 2.071, "swiglu n=8,d=1024 [tune_samples_h100_d]": 1.087,
    "swiglu n=8,d=4096 [tune_samples_h100_d]": 1.063, "attention b=2,g=8,h=8192,d=128 [tune_samples_h100_d]": 1.853,
    "rmsnorm n=8,d=4096 [tune_samples_h100_e]": 1.449, "rmsnorm n=8,d=1024 [tune_samples_h100_e]": 1.290,
    "rmsnorm_mlp n=8,d=1024 [tune_samples_h100_e]": 1.771, "rmsnorm_mlp n=16,d=1024 [tune_samples_h100_e]": 1.763,
    "swiglu n=8,d=1024 [tune_samples_h100_e]": 1.071, "swiglu n=8,d=4096 [tune_samples_h100_e]": 1.054,
    "attention b=2,g=8,h=8192,d=128 [tune_samples_h100_e]": 1.667,
    "attention b=2,g=8,h=16384,d=128 [tune_samples_h100_e]": 1.352,
    "attention b=2,g=8,h=8192,d=128 [tune_samples_h100_f]": 1.642,
    "attention b=2,g=8,h=16384,d=128 [tune_samples_h100_f]": 1.355, "qk_attention b=2,g=8,h=8192,d=128": 1.869,
    "qk_attention b=2,g=8,h=16384,d=128": 1.359, "rmsnorm n=8,d=4096 [tune_samples_h100_f]": 1.446,
    "rmsnorm n=8,d=1024 [tune_samples_h100_f]": 1.288,
}


H200_TODAY = {  # one gpu_bench run (2026-11-27, 18 of 19 configs, files a and b), the tuner's own timed candidates;
    # calibration fitted on both (prism/tune/data/h200.json). The smallest-dot term (prism.tune.cost._warps_over_dot)
    # came with these: it took the H200's picks from a geomean regret of 1.48 to 1.26 (max 3.53 to 2.03), and moved
    # three configs of H100 file d (the one H100 file rebuilt with it) to slower picks: 1.288 -> 2.002,
    # 1.777 -> 1.824, 2.041 -> 2.071, raised above by that change and no other.
    "rmsnorm n=8,d=4096": 2.027, "rmsnorm n=8,d=1024": 1.974, "rmsnorm_mlp n=8,d=1024": 1.005,
    "rmsnorm_mlp n=16,d=1024": 1.747, "swiglu n=8,d=1024": 1.105, "swiglu n=8,d=4096": 1.241,
    "attention b=2,g=8,h=8192,d=128": 1.184, "attention b=2,g=8,h=16384,d=128": 1.112,
    "qk_attention b=2,g=8,h=8192,d=128": 1.172, "qk_attention b=2,g=8,h=16384,d=128": 1.102,
    "lora n=16,d=256,r=16,o=4096": 1.000, "rmsnorm_linear n=2,d=4096,o=6144": 1.874,
    "gqa b=2,k=8,g=4,h=4096,d=128 [tune_samples_h200_a]": 1.238,
    "gqa b=2,k=8,g=4,h=4096,d=128 [tune_samples_h200_b]": 1.238, "gqa b=2,k=32,g=1,h=4096,d=128": 1.349,
    "gqa b=2,k=1,g=32,h=4096,d=128": 1.192, "gqa b=2,k=8,g=64,h=4096,d=128": 1.070, "ntrans n=8,d=4096": 1.036,
    "ntrans n=64,d=4096": 1.007,
}
TODAY = {"h100": H100_TODAY, "h200": H200_TODAY}
"""Per GPU kind, the regret of today's pick per config: each kind's files (tune_samples_<kind>_*.json) replayed
with its shipped calibration."""


def _slower_picks(kind: str = "h100") -> dict[str, tuple[float, str]]:
    """The configs measured on `kind` where the model (its shipped calibration) picks a measured kernel slower
    than today's pick, with its regret and label."""
    samples = load(sorted(RESULTS.glob(f"tune_samples_{kind}_*.json")))
    found = {r.group: r for r in regrets(samples, get_target(kind))}
    assert set(found) == set(TODAY[kind])
    return {g: (round(r.regret, 3), r.picked) for g, r in found.items() if r.regret > TODAY[kind][g] + 1e-3}


@pytest.mark.parametrize("kind", sorted(TODAY))
def test_the_tuner_picks_no_slower_measured_kernel_than_today(kind):
    assert not _slower_picks(kind)


def test_the_oracle_catches_a_wrong_cost_model(monkeypatch):
    """The check has teeth: a model that forgets waves of blocks over the SMs, one whose L2 re-reads no longer
    pass through the SM (as before 2026-11-25), or one where warps past its smallest dot's tile come free (as
    before 2026-11-27), picks slower measured kernels and fails it."""
    import prism.tune.cost as cost

    right = cost.kernel_seconds
    monkeypatch.setattr(cost, "kernel_seconds", lambda w, t=H100: right(replace(w, grid=(min(w.blocks, t.sms),)), t))
    assert _slower_picks()                                          # waves ignored: as if every block ran at once
    monkeypatch.setattr(cost, "kernel_seconds", lambda w, t=H100: right(replace(w, iter_l2=0.0, pre_l2=0.0), t))
    assert "attention b=2,g=8,h=8192,d=128 [tune_samples_h100_b]" in _slower_picks()     # L2 re-reads free
    monkeypatch.setattr(cost, "kernel_seconds", lambda w, t=H100: right(replace(w, dot_tile=0), t))
    assert "rmsnorm_mlp n=8,d=1024" in _slower_picks("h200")      # warps past the smallest dot's tile free


def test_regret_is_the_measured_time_of_the_models_pick_over_the_fastest():
    def sample(label, us, loop):  # the model charges a longer loop more
        from prism.tune.cost import KernelWork

        work = KernelWork(name="k", grid=(1,), loop=loop, pre_bytes=0.0, iter_bytes=4096.0, store_bytes=0, iter_dot=0,
                          post_dot=0, iter_vec=0, post_vec=0, warps=4, smem=0, registers=32, spills=False,
                          real_elements=1, padded_elements=1)
        return Sample("g", label, (work,), us)

    right = regrets([sample("a", 10.0, 1), sample("b", 30.0, 8), sample("c", 20.0, 4)], get_target("h100"))
    assert [(r.regret, r.picked, r.best, r.candidates) for r in right] == [(1.0, "a", "a", 3)]
    wrong = regrets([sample("a", 40.0, 1), sample("b", 10.0, 8)], get_target("h100"))
    assert wrong[0].regret == 4.0 and wrong[0].picked == "a"


def test_a_file_that_is_not_measured_candidates_is_refused_by_name(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": []}')
    with pytest.raises(InputError, match="x.json: not a file of measured candidates"):
        load([bad])


def _from_bench(tmp_path, run: Path, searches: Path) -> subprocess.CompletedProcess:
    root = RESULTS.parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(root / "benchmarks" / "tune_calibrate.py"), "from-bench", str(run),
                           "--search-dir", str(searches), "--out", str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=300, env=env)


def test_the_stored_gpu_bench_run_rebuilds_into_the_stored_samples(tmp_path):
    """`tune_calibrate.py from-bench` turns the 2026-11-26 gpu_bench run (with the searches it tuned, kept beside
    it) into tune_samples_h100_d.json: the same candidates, times and kernels. When the cost model's view of a
    kernel changes, this fails: run the same command into that file, so the oracle replays what the model sees."""
    run = json.loads(RUN.read_text())
    run["rows"].append({"workload": "swiglu", "config": {"n": 8, "d": 2048}, "error": "search failed: boom"})
    (tmp_path / "run.json").write_text(json.dumps(run))     # a row that failed has no candidates: skipped, said
    done = _from_bench(tmp_path, tmp_path / "run.json", RUN_SEARCHES)
    assert done.returncode == 0, done.stderr
    assert "207 timed candidates of 7 config(s)" in done.stdout and "1 config(s) without a tuning report" in done.stdout
    assert json.loads((tmp_path / "out.json").read_text())["samples"] == \
        json.loads((RESULTS / "tune_samples_h100_d.json").read_text())["samples"]


def test_from_bench_refuses_searches_that_are_not_the_runs(tmp_path):
    """Another build's searches, or another program's search under a workload's name, give one line and exit 2,
    never samples of other kernels than the run timed."""
    run = json.loads(RUN.read_text())
    (tmp_path / "other_build.json").write_text(json.dumps(run | {"build": "0.0.0+other"}))
    done = _from_bench(tmp_path, tmp_path / "other_build.json", RUN_SEARCHES)
    assert done.returncode == 2 and "searches of Prism 0.0.0+other" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    wrong = tmp_path / "searches"
    wrong.mkdir()
    for name in ("rmsnorm_mlp", "swiglu", "attention"):
        shutil.copy(RUN_SEARCHES / f"{name}.json", wrong)
    shutil.copy(RUN_SEARCHES / "rmsnorm_mlp.json", wrong / "rmsnorm.json")
    done = _from_bench(tmp_path, RUN, wrong)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


def _regret(*args: str) -> subprocess.CompletedProcess:
    root = RESULTS.parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(root / "benchmarks" / "tune_calibrate.py"), "regret", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_the_regret_command_replays_the_oracle_and_the_model_before_a_field():
    """`tune_calibrate.py regret` prints what the oracle test replays (the shipped calibration's regret per
    config); `--without dot_tile` replays the model before that field (one H100 config's pick was faster then,
    TODAY's note says by how much); an unknown field is one line and exit 2."""
    files = [str(p) for p in sorted(RESULTS.glob("tune_samples_h100_*.json"))]
    done = _regret("--kind", "h100", *files)
    assert done.returncode == 0, done.stderr
    assert f"| rmsnorm n=8,d=1024 [tune_samples_h100_d] | 28 | {TODAY['h100']['rmsnorm n=8,d=1024 [tune_samples_h100_d]']:.2f} |" \
        in done.stdout
    before = _regret("--kind", "h100", "--without", "dot_tile", *files)
    assert "| rmsnorm n=8,d=1024 [tune_samples_h100_d] | 28 | 1.29 |" in before.stdout
    bad = _regret("--kind", "h100", "--without", "nope", *files)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
