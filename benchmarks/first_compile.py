"""First compile, cold: Inductor, `backend="prism"`, and Prism with background superoptimization, each in a fresh
process with empty caches (Prism's result cache and Inductor's), side by side.

    python benchmarks/first_compile.py [--model decoder_layer|llama|qwen2|phi3|gpt2] [--runs 3]

decoder_layer: examples/decoder_layer.py at its example sizes (a Llama-style layer at decode size), one call.
llama, qwen2, phi3, gpt2: examples/hf_decode.py's 2-layer random model of that family, its prefill (8 tokens)
and one decode step, as benchmarks/hf_decode.py times them. For each: the seconds until the first outputs are
back (the first compile), and for Prism the seconds until every region runs its chosen kernels
(`prism.capture.wait()`); outputs are checked against eager. Then the same again in another fresh process with
the caches the first one filled (warm: a second run of the same program). Medians of --runs, each run's seconds
in brackets. --out also writes them as JSON for the benchmarks page.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from prism.bench.pages import first_compile_table

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import copy, json, runpy, sys, time, torch
sys.path.insert(0, sys.argv[3])
import prism.capture
model, backend = sys.argv[1], sys.argv[2]
options = {"background": True} if backend == "prism-background" else None
torch.manual_seed(0)
if model == "decoder_layer":
    layer, inputs = runpy.run_path(sys.argv[3] + "/examples/decoder_layer.py")["example"]()
    with torch.no_grad():
        want = layer(*inputs)
    f = torch.compile(layer, backend=backend.split("-")[0], options=options)
    def first():
        return f(*inputs)
else:
    from transformers import DynamicCache
    hf = runpy.run_path(sys.argv[3] + "/examples/hf_decode.py")
    m = hf["model"](model, 2)
    key = hf["cache_keyword"](m)
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    def step(forward):
        cache = DynamicCache()
        nxt = forward(input_ids=prompt, **{key: cache}, use_cache=True).logits[:, -1:].argmax(-1)
        return forward(input_ids=nxt, **{key: cache}, use_cache=True).logits
    with torch.no_grad():
        want = step(m.forward)
    m.forward = torch.compile(m.forward, backend=backend.split("-")[0], options=options)
    def first():
        return step(m.forward)
with torch.no_grad():
    t0 = time.perf_counter()
    got = first()
    first_s = time.perf_counter() - t0
    prism.capture.wait()
    ready_s = time.perf_counter() - t0
    after = first()
err = max(float((got - want).abs().max()), float((after - want).abs().max()))
print(json.dumps({"first_s": first_s, "ready_s": ready_s, "max_error": err}))
"""

BACKENDS = ("inductor", "prism", "prism-background")
MODELS = ("llama", "qwen2", "phi3", "gpt2")
"""examples/hf_decode.py's families (its MODELS; that file needs transformers, this one's parent does not)."""


def run(model: str, backend: str) -> dict:
    """A cold first compile in a fresh process, with empty result and Inductor caches, then a warm one in another
    fresh process with the caches the first filled: {"first_s", "ready_s", "max_error", "warm_s"}."""
    with tempfile.TemporaryDirectory(prefix="prism-first-") as tmp:
        env = os.environ | {"PRISM_CACHE_DIR": f"{tmp}/prism", "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor",
                            "TRITON_CACHE_DIR": f"{tmp}/triton"}
        cold, warm = (_child(model, backend, env) for _ in range(2))
    return cold | {"warm_s": warm["first_s"], "max_error": max(cold["max_error"], warm["max_error"])}


def _child(model: str, backend: str, env: dict[str, str]) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, model, backend, str(ROOT)], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"first_compile: {model} with {backend} failed: {p.stderr.strip().splitlines()[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("decoder_layer", *MODELS), default="decoder_layer")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, help="also write the runs as JSON (the benchmarks page reads it)")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {b: [] for b in BACKENDS}
    for k in range(args.runs):
        for backend in BACKENDS:
            runs[backend].append(run(args.model, backend))
            r = runs[backend][-1]
            print(f"run {k} {backend}: first {r['first_s']:.1f} s, ready {r['ready_s']:.1f} s, warm "
                  f"{r['warm_s']:.1f} s, max |error| {r['max_error']:.1e}", file=sys.stderr)
    doc = {"model": args.model, "cores": os.cpu_count(), "runs": runs,
           "command": "python benchmarks/first_compile.py " + " ".join(sys.argv[1:])}
    print(first_compile_table(doc))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
