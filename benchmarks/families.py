"""Every family `transformers` ships a causal-LM class for, through `torch.compile(backend="prism")` on the CPU.

    python benchmarks/families.py                          # every family, results/families_cpu.json
    python benchmarks/families.py --family gemma2 olmo2    # some of them
    python benchmarks/families.py --table                  # the stored results as a table
    python benchmarks/families.py --max-block-ops 6 --out benchmarks/results/families_blocks6_cpu.json
                                                           # every family as the family test runs it

Each family is built from a small random config (examples/hf_decode.py's `config`: 64 hidden, 4 heads, 2 layers;
no weights are downloaded), run eagerly and through the backend on the same prompt (batch 2, 8 tokens) and one
decode step with a KV cache, each family in a fresh process with a time limit. The backend runs with the tests'
settings (the rest eager, 2 candidates, the tests' search limits unless --search-seconds is lower), and the
families of one run share a result cache, as a user's models share Prism's: a region that two families have
alike is searched once.

Per family: a status (`match`: the backend's logits are eager's within 1e-4; `differs`; `crash`: the compiled
model raised; `timeout`; `eager fails` or `no small config`: the family itself could not run here, with torch's
or transformers' reason; `too large`: its small config still has more than --max-params parameters), the largest
|logits - eager|, the graphs compiled, the regions fused, the cones left to torch with the reasons, the left
cones that hold a norm (which the family test wants fused, or a named reason), and what the last graph (the decode
step's) launches per call: Prism's kernels and torch's ops (the rest runs eagerly: one launch per op that writes
elements; prism.capture.launches).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prism.bench.pages import families_table

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "families_cpu.json"

CHILD = r"""
import json, runpy, sys, time, warnings
import torch
warnings.filterwarnings("ignore")
import transformers
transformers.logging.set_verbosity_error()
import prism.capture as pc

name, max_params, root, search_seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
max_block_ops = int(sys.argv[5])
hf = runpy.run_path(root + "/examples/hf_decode.py")
pc.OPTIONS.rest, pc.OPTIONS.budget = "eager", 2
pc.OPTIONS.search = {"time_limit": search_seconds, "max_grid": 1}
if max_block_ops:
    pc.OPTIONS.search |= {"max_block_ops": max_block_ops}
def say(**out):
    print("RESULT " + json.dumps(out, default=str), flush=True)
    sys.exit(0)
problem = hf["unrunnable"](name, max_params)
if problem:
    say(status=problem[0], why=problem[1])
prompt = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
params = None
try:
    eager = hf["model"](name)
    params = sum(p.numel() for p in eager.parameters())
    want, _ = hf["decode"](eager, prompt, 2)
except Exception as e:
    say(status="eager fails", why=f"{type(e).__name__}: {e}"[:300], params=params)
torch._dynamo.reset()
start, t0 = len(pc.history), time.perf_counter()
try:
    got, _ = hf["decode"](hf["compiled"](hf["model"](name)), prompt, 2)
except Exception as e:
    say(status="crash", why=f"{type(e).__name__}: {e}"[:600], params=params, seconds=time.perf_counter() - t0)
seconds = time.perf_counter() - t0
error = max(float((g - w).abs().max()) for g, w in zip(got, want))
graphs = pc.history[start:]
left = [{"what": r["what"], "why": r["why"], "ops": sorted(set(r.get("ops", [])))} for g in graphs for r in g["left"]]
say(status="match" if error <= 1e-4 else "differs", error=error, params=params, seconds=seconds,
    graphs=len(graphs), fused=sum(len(g["replaced"]) for g in graphs), left=left,
    launches=[g["launches"] for g in graphs if "launches" in g])
"""


def run(name: str, timeout: float, max_params: int, search_seconds: float, max_block_ops: int,
        env: dict[str, str]) -> dict:
    """One family in a fresh process (its own process group, killed whole at the time limit)."""
    start = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, name, str(max_params), str(ROOT), str(search_seconds),
                          str(max_block_ops)],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"family": name, "status": "timeout", "why": f"no result within {timeout:.0f} s", "seconds": timeout}
    except BaseException:   # interrupted: the family's process and its workers go too
        os.killpg(p.pid, signal.SIGKILL)
        raise
    results = [line[len("RESULT "):] for line in out.splitlines() if line.startswith("RESULT ")]
    if not results:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        return {"family": name, "status": "crash", "why": f"the process ended ({p.returncode}): {tail}"[:600],
                "seconds": time.perf_counter() - start}
    return {"family": name} | json.loads(results[-1])


def _without_out(argv: list[str]) -> list[str]:
    """The command's arguments without where it wrote (the stored file says that)."""
    return [a for k, a in enumerate(argv) if a != "--out" and (k == 0 or argv[k - 1] != "--out")]


def families() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="*", help="families to run (default: every one)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per family")
    ap.add_argument("--max-params", type=int, default=3_000_000)
    ap.add_argument("--search-seconds", type=float, default=900.0,
                    help="each region's search time limit (the tests': 900, which their searches never reach)")
    ap.add_argument("--max-block-ops", type=int, default=0,
                    help="each search's ops per block at most (the family test's: 6; default: the search's own)")
    ap.add_argument("--out", type=Path, default=OUT, help="results JSON (families run now replace their entries)")
    ap.add_argument("--table", action="store_true", help="print the stored results as a table and run nothing")
    args = ap.parse_args()
    stored = json.loads(args.out.read_text()) if args.out.exists() else {"results": []}
    by_name = {r["family"]: r for r in stored["results"]}
    if not args.table:
        import transformers
        import torch

        stored |= {"transformers": transformers.__version__, "torch": torch.__version__, "cores": os.cpu_count(),
                   "command": "python benchmarks/families.py " + " ".join(_without_out(sys.argv[1:]))}
        with tempfile.TemporaryDirectory(prefix="prism-families-") as tmp:
            env = os.environ | {"PRISM_CACHE_DIR": tmp}
            for name in args.family or families():
                by_name[name] = run(name, args.timeout, args.max_params, args.search_seconds, args.max_block_ops,
                                    env)
                r = by_name[name]
                print(f"{name}: {r['status']} {r.get('why', '')} {r.get('error', '')}", file=sys.stderr, flush=True)
                stored["results"] = sorted(by_name.values(), key=lambda r: r["family"])
                args.out.write_text(json.dumps(stored, indent=1) + "\n")
    print(families_table(sorted(by_name.values(), key=lambda r: r["family"])))


if __name__ == "__main__":
    main()
