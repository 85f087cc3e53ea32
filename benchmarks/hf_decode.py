"""One decode step of a Hugging Face decoder: eager, Inductor and `backend="prism"`, side by side in one run.

Small random configs (examples/hf_decode.py). For each backend: the first compile's seconds (the prefill's
graph and the first decode step's, cache as it is: run twice for a warm one) and the median time of one
decode step at a fixed KV length, called as a user calls it (a copy of the same cache each time, so every
call sees the same shapes). On a CPU Prism's regions run their programs as torch ops; on a GPU, its kernels.

    python benchmarks/hf_decode.py --model llama --layers 2 --repeat 20
"""

from __future__ import annotations

import argparse
import copy
import runpy
import statistics
import time
from pathlib import Path

import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hf_decode.py"


def measure(hf, name: str, layers: int, backend: str | None, repeat: int, device: str) -> tuple[float, float]:
    """(seconds of the first compile: prefill and one decode step; median µs of one decode step)."""
    from transformers import DynamicCache

    torch._dynamo.reset()
    m = hf.model(name, layers).to(device)
    if backend is not None:
        m.forward = torch.compile(m.forward, backend=backend)
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    cache = DynamicCache()
    with torch.no_grad():
        start = time.perf_counter()
        nxt = m(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        step_cache = copy.deepcopy(cache)
        m(input_ids=nxt, past_key_values=copy.deepcopy(step_cache), use_cache=True)
        compile_s = time.perf_counter() - start
        times = []
        for _ in range(repeat):
            c = copy.deepcopy(step_cache)
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            m(input_ids=nxt, past_key_values=c, use_cache=True)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return compile_s, statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("llama", "qwen2", "gpt2"), default="llama")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    import prism.capture

    hf = argparse.Namespace(**runpy.run_path(str(EXAMPLE)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [(label, measure(hf, args.model, args.layers, backend, args.repeat, device))
            for label, backend in (("eager", None), ("inductor", "inductor"), ("prism", "prism"))]
    eager = rows[0][1][1]
    fused = sum(len(r["replaced"]) for r in prism.capture.history)
    print(f"{args.model}, {args.layers} layers, {device}: one decode step at KV length 8, median of {args.repeat}")
    print("| backend | first compile s | step µs | step / eager |")
    print("|---|---|---|---|")
    for label, (compile_s, us) in rows:
        print(f"| {label} | {compile_s:.1f} | {us:.0f} | {us / eager:.2f} |")
    print(f"prism replaced {fused} region(s) in the prefill's and the decode step's graphs")


if __name__ == "__main__":
    main()
