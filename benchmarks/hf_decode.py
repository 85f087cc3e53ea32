"""One decode step of a Hugging Face decoder: eager, Inductor and `backend="prism"`, side by side in one run.

Two shapes:
  --model llama|qwen2|phi3|gpt2 (default): the small random configs of examples/hf_decode.py, float32, a KV cache
      of 8 prompt tokens (transformers' DynamicCache, a copy of it per call so that every call sees the same
      sizes). For each backend: the first compile's seconds (the prefill's graph and the first decode
      step's, result cache as it is: run twice for a warm one), the seconds until every cone runs its chosen
      kernels (later than the first compile with --background, which superoptimizes on a thread: the step is
      timed once they do), and the median µs of one decode step as called. On a CPU Prism's regions run their programs as torch ops; on a GPU, its kernels.
  --llama2048: a Llama-shaped float16 model (hidden 2048, 16 heads, 4 KV heads, MLP 5632, --layers layers,
      random weights), a StaticCache holding 1024 prompt tokens, batch 1 and 8 (--batches). On a GPU: eager,
      Inductor, Inductor's reduce-overhead mode (a CUDA graph per step), Prism, and Prism in that mode (the rest
      in Inductor's CUDA graphs, Prism's ops captured inside), each as called and, except the reduce-overhead
      ones (already replays), as the replay of one step captured in a CUDA graph. On a CPU: eager and Prism as
      called (Prism's regions run their programs as torch ops there). Then the launches per layer (the step's,
      Prism's kernels and torch's rest, over the layers: prism.capture.launches) and each region's choice
      (prism.capture.history). Each step first sets the cache's length back to the prompt's
      (one small fill per layer, timed alike for all).
  --kernels [FILE] (with --llama2048, on a CUDA GPU): eager's, Inductor's and Prism's kernels side by side, from
      torch.profiler over KERNEL_STEPS steps: calls and device µs per step, and for Prism's kernels, whose bytes
      the compile record gives (prism.bench.kernels.prism_bytes), GB/s and % of the device-to-device copy
      bandwidth measured in the same run: one table after the others, and the rows as JSON in FILE (default
      benchmarks/results/decode_kernels_<gpu>_<date>.json).

    python benchmarks/hf_decode.py --model llama --layers 2 --repeat 20
    python benchmarks/hf_decode.py --model llama --layers 2 --repeat 20 --background   # cones optimized on a thread
    python benchmarks/hf_decode.py --llama2048 --layers 2 --repeat 30 --budget 8   # on a CUDA GPU: the table
    python benchmarks/hf_decode.py --llama2048 --layers 2 --repeat 30 --budget 8 --kernels   # and its kernels
    python benchmarks/hf_decode.py --llama2048 --batches 1,8,32,64 --prefill 512,2048   # decode and prefill rows
"""

from __future__ import annotations

import argparse
import copy
import re
import runpy
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hf_decode.py"
if str(ROOT) not in sys.path:  # a checkout that is not installed
    sys.path.insert(0, str(ROOT))

import prism.capture  # noqa: E402  (registers the backend)
from prism.bench.kernels import KernelRow, format_table, kernel_rows, prism_bytes, write_json  # noqa: E402

BACKENDS = (("eager", None, None), ("inductor", "inductor", None), ("prism", "prism", None))
GPU_BACKENDS = BACKENDS[:2] + (("inductor reduce-overhead", "inductor", "reduce-overhead"),) + BACKENDS[2:] + (
    ("prism reduce-overhead", "prism", "reduce-overhead"),)
PDL_BACKENDS = (("prism pdl", "prism", {"pdl": True}), ("prism reduce-overhead pdl", "prism",
                                                       {"cudagraphs": True, "pdl": True}))
"""--pdl's rows: Prism's kernels with programmatic dependent launch (RunOptions.pdl), as called and in Inductor's
CUDA graphs (torch.compile takes a mode or options, not both: options={"cudagraphs": True} is the mode's)."""
KERNEL_STEPS = 20
"""Steps torch.profiler records for --kernels."""


def median_us(step: Callable[[], Any], repeat: int, cuda: bool) -> float:
    """Median µs of `step()` over `repeat` calls (synchronized around each on a GPU)."""
    times = []
    for _ in range(repeat):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def small(hf: Any, name: str, layers: int, backend: str | None, repeat: int, device: str,
          options: dict[str, Any] | None = None) -> dict[str, float]:
    """A small random config with a DynamicCache: first-compile seconds, one decode step's median µs, and with
    background superoptimization the seconds from the compile's start until every cone runs its choice."""
    from transformers import DynamicCache

    torch._dynamo.reset()
    m = hf.model(name, layers).to(device)
    if backend is not None:
        m.forward = torch.compile(m.forward, backend=backend, options=options)
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    cache, key = DynamicCache(), hf.cache_keyword(m)
    with torch.no_grad():
        start = time.perf_counter()
        nxt = m(input_ids=prompt, **{key: cache}, use_cache=True).logits[:, -1:].argmax(-1)
        m(input_ids=nxt, **{key: copy.deepcopy(cache)}, use_cache=True)
        compile_s = time.perf_counter() - start
        prism.capture.wait()
        ready_s = time.perf_counter() - start
        copies = [copy.deepcopy(cache) for _ in range(repeat)]
        us = median_us(lambda: m(input_ids=nxt, **{key: copies.pop()}, use_cache=True), repeat,
                       device == "cuda")
    return {"compile_s": compile_s, "called_us": us, "ready_s": ready_s}


def llama2048(layers: int, batch: int, kv: int, backend: str | None, mode: str | dict[str, Any] | None,
              repeat: int, device: str = "cuda", kernels: bool = False, prefill: int = 0) -> dict[str, Any]:
    """The Llama-shaped float16 step: first-compile seconds, µs as called and (on a GPU) in a CUDA graph, for
    Prism each region's choice and launches, and with `kernels` (on a GPU) the step's kernels by device time
    over KERNEL_STEPS steps (prism.bench.kernels; Prism's with their bytes where the compile record gives them).
    With `prefill` tokens, the step is a prefill of that many tokens instead (no cache: its logits' last row).
    `mode`: torch.compile's mode, or its options (a dict)."""
    import transformers as tf

    torch._dynamo.reset()
    torch.manual_seed(0)
    cuda = device == "cuda"
    config = tf.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                            num_attention_heads=16, num_key_value_heads=4,
                            max_position_embeddings=max(kv, prefill) + 64)
    m = tf.LlamaForCausalLM(config).to(device, torch.float16).eval()
    cache = tf.StaticCache(config=config, max_cache_len=kv + 1)
    prompt = torch.randint(0, 32000, (batch, kv), generator=torch.Generator().manual_seed(1)).to(device)
    row: dict[str, Any] = {}
    start_record = len(prism.capture.history)
    with torch.no_grad():
        key = runpy.run_path(str(EXAMPLE))["cache_keyword"](m)
        nxt = m(input_ids=prompt, **{key: cache}, use_cache=True, logits_to_keep=1).logits.argmax(-1)
        position = torch.tensor([kv], device=device)
        how = {"options": mode} if isinstance(mode, dict) else {"mode": mode}
        forward = m.forward if backend is None else torch.compile(m.forward, backend=backend, **how)
        tokens = torch.randint(0, 32000, (batch, prefill), generator=torch.Generator().manual_seed(2)).to(device)

        def step() -> Any:  # the cache back at the prompt's length: every step writes the same slot
            if prefill:
                return forward(input_ids=tokens, use_cache=False, logits_to_keep=1)
            for layer in cache.layers:
                layer.cumulative_length.fill_(kv)
            return forward(input_ids=nxt, **{key: cache}, cache_position=position, use_cache=True)
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - start
        row["launches"] = launches_per_layer(start_record, layers) if backend == "prism" else None
        row["regions"] = ([(r["root"], r["chosen"], r["launches"], r["us"], r["measured"])
                           for r in prism.capture.history[-1]["replaced"]] if backend == "prism" else [])
        row["called_us"] = median_us(step, repeat, cuda)
        if cuda and mode != "reduce-overhead" and not (isinstance(mode, dict) and mode.get("cudagraphs")):
            try:
                row["graph_us"] = _graph_us(step, repeat)
            except Exception as e:  # the row says why there is no figure
                row["graph_failure"] = f"{type(e).__name__}: {str(e)[:200]}"
        if cuda and kernels:
            from prism.tune.profile import kernel_profile

            nbytes = prism_bytes(prism.capture.history[-1]["replaced"]) if backend == "prism" else None
            row["kernels"] = kernel_rows(kernel_profile(step, [], KERNEL_STEPS).key_averages(), KERNEL_STEPS, nbytes)
    return row


def launches_per_layer(start: int, layers: int) -> float:
    """The launches per layer, Prism's kernels and torch's rest together, of the last graph compiled since
    history record `start` (the decode step's): its record's `launches` (prism.capture.launches)."""
    records = prism.capture.history[start:]
    if not records:
        return 0.0
    return (records[-1]["launches"]["total"] or 0) / layers


def _graph_us(step: Callable[[], Any], repeat: int) -> float:
    """Median µs of replaying one `step()` captured in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return median_us(graph.replay, repeat, True)


def default_kernels_path(device: str) -> Path:
    """benchmarks/results/decode_kernels_<device, as a file name>_<date>.json."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return ROOT / "benchmarks" / "results" / f"decode_kernels_{slug}_{time.strftime('%Y-%m-%d')}.json"


def write_kernels(path: str | Path, device: str, layers: int, tables: dict[int, dict[str, list[KernelRow]]]) -> None:
    """Print every batch's and backend's kernels as one table, under the copy bandwidth they are measured against,
    and write them to `path` as JSON (prism.bench.kernels.write_json)."""
    from prism.bench.gpu import copy_bandwidth
    from prism.tune.profile import bench

    copy_bps = copy_bandwidth(bench)
    print(f"Kernels by device time over {KERNEL_STEPS} steps, {device}; device-to-device copy "
          f"{copy_bps / 1e9:.0f} GB/s; GB/s only where a kernel's bytes are known (Prism's: its regions' DRAM floor)")
    print(format_table({f"{label}, batch {batch}": rows for batch, backends in tables.items()
                        for label, rows in backends.items()}, copy_bps))
    write_json(path, {"device": device, "copy_bytes_per_s": copy_bps, "layers": layers, "steps": KERNEL_STEPS,
                      "command": shlex.join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                      "batches": [{"batch": b, "backends": backends} for b, backends in tables.items()]})
    print(f"kernels written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("llama", "qwen2", "phi3", "gpt2"), default="llama")
    ap.add_argument("--llama2048", action="store_true", help="the Llama-shaped float16 step (a CUDA GPU)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batches", default="1,8", help="--llama2048's batch sizes, comma-separated (default %(default)s)")
    ap.add_argument("--prefill", default="", help="--llama2048 on a GPU: also a prefill of each of these token "
                    "counts at batch 1, comma-separated (e.g. 512,2048)")
    ap.add_argument("--budget", type=int, default=prism.capture.OPTIONS.budget,
                    help="candidates Prism tunes per region (default %(default)s, the backend's)")
    ap.add_argument("--kernels", nargs="?", const="", metavar="FILE",
                    help="--llama2048 on a GPU: eager's, Inductor's and Prism's kernels by device time, one table, "
                    "and as JSON in FILE (default benchmarks/results/decode_kernels_<gpu>_<date>.json)")
    ap.add_argument("--pdl", action="store_true", help="--llama2048 on a GPU: also Prism with programmatic dependent "
                    "launch, as called and in CUDA graphs (rows 'prism pdl', 'prism reduce-overhead pdl')")
    ap.add_argument("--background", action="store_true",
                    help="the prism row with options={'background': True}: cones superoptimized on a thread")
    args = ap.parse_args()
    if args.kernels is not None and not args.llama2048:
        ap.error("--kernels goes with --llama2048")
    prism.capture.OPTIONS.budget = args.budget
    cuda = torch.cuda.is_available()
    if args.llama2048:
        kernels = args.kernels is not None and cuda
        if args.kernels is not None and not cuda:
            print("--kernels: per-kernel device times need a CUDA GPU; none here, so no kernel table")
        where = torch.cuda.get_device_name() if cuda else "CPU (no CUDA graphs; Prism's choices by its cost model)"
        print(f"Llama-shaped float16 decode step, {args.layers} layers, KV cache 1024, {where}: µs, median of "
              f"{args.repeat}")
        print("| step | backend | first compile s | called µs | CUDA graph µs | launches / layer (Prism + torch) |")
        print("|---|---|---|---|---|---|")
        regions = []
        tables: dict[int, dict[str, list[KernelRow]]] = {}
        prefills = [int(n) for n in args.prefill.split(",") if n]
        if prefills and not cuda:
            print("--prefill: skipped on a CPU (a float16 prefill of hundreds of tokens takes minutes per call here)")
        if args.pdl and not cuda:
            print("--pdl: skipped on a CPU (programmatic dependent launch is a GPU's: sm_90 and later)")
        rows = [(f"decode, batch {b}", b, 0) for b in map(int, args.batches.split(","))]
        rows += [(f"prefill {n}", 1, n) for n in (prefills if cuda else [])]
        for what, batch, prefill in rows:
            backends = GPU_BACKENDS + PDL_BACKENDS * args.pdl if cuda else (BACKENDS[0], BACKENDS[2])
            for label, backend, mode in backends:
                r = llama2048(args.layers, batch, 1024, backend, mode, args.repeat, "cuda" if cuda else "cpu",
                              kernels and mode is None and not prefill, prefill)
                if "kernels" in r:
                    tables.setdefault(batch, {})[label] = r["kernels"]
                graph = f"{r['graph_us']:.0f}" if "graph_us" in r else r.get(
                    "graph_failure", "(a replay as called)" if cuda else "")
                launches = "" if r["launches"] is None else f"{r['launches']:.0f}"
                print(f"| {what} | {label} | {r['compile_s']:.1f} | {r['called_us']:.0f} | {graph} | {launches} |",
                      flush=True)
                regions += [(what, *region) for region in r["regions"] if mode is None]
        print("| step | Prism region (its roots) | chosen | launches | µs (measured, else estimated) |\n"
              "|---|---|---|---|---|")
        for what, root, chosen, launches, us, measured in regions:
            time_text = "" if us is None else f"{us:.1f}" + ("" if measured else " est.")
            print(f"| {what} | {root} | {chosen} | {launches} | {time_text} |")
        if kernels:
            write_kernels(args.kernels or default_kernels_path(where), where, args.layers, tables)
        return
    hf = argparse.Namespace(**runpy.run_path(str(EXAMPLE)))
    device = "cuda" if cuda else "cpu"
    start = len(prism.capture.history)
    options = {"background": True} if args.background else None
    rows = [(label + (" background" if options and backend == "prism" else ""),
             small(hf, args.model, args.layers, backend, args.repeat, device, options if backend == "prism" else None))
            for label, backend, _ in BACKENDS]
    eager = rows[0][1]["called_us"]
    fused = sum(len(r["replaced"]) for r in prism.capture.history[start:])
    print(f"{args.model}, {args.layers} layers, {device}: one decode step at KV length 8, median of {args.repeat}")
    print("| backend | first compile s | every cone optimized after s | step µs | step / eager |")
    print("|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {r['compile_s']:.1f} | {r['ready_s']:.1f} | {r['called_us']:.0f} | "
              f"{r['called_us'] / eager:.2f} |")
    print(f"prism replaced {fused} region(s) in the prefill's and the decode step's graphs; "
          f"{launches_per_layer(start, args.layers):.1f} launches per layer in the decode step's, Prism's and torch's")


if __name__ == "__main__":
    main()
