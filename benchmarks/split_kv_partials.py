"""Split-KV partials against atomic adds on a GPU: the attention workloads' paper form, both ways.

For each real config (fp16) and split count: the paper's split-KV form whose kernel 1 sums the splits with
float32 atomic adds into a zeroed buffer (`w.fused(cfg)`), and the same kernel 1 keeping each split's sums
side by side, folded back by kernel 2's group sums (`w.fused(cfg, partials=True)`, no atomics). Each is
timed as called and replayed in a CUDA graph (prism.tune.profile: do_bench medians over rotated input
copies), and run `--repeats` times on one input: the number of distinct outputs (1: bit-identical runs) and
the error against torch's float32 attention. Inputs have the paper's logit scale (the form is unsafe at
larger logits: benchmarks/softmax_safety.py). Needs a CUDA GPU.

    python benchmarks/split_kv_partials.py [--repeats 20] [--out split_kv_partials.json] [--kernels FILE]

--kernels also writes each form's kernels by device time (torch.profiler, 50 calls) at Attention's largest
config and default split: where the second kernel's time goes.
"""

from __future__ import annotations

import argparse
import json

import torch

import prism.workloads as wl
from prism.bench.paper_report import markdown_table
from prism.codegen import compile_graph
from prism.tune.profile import input_copies, kernel_profile, timings
from prism.workloads.attention import default_split


def measure(name: str, cfg: dict[str, int], repeats: int) -> list[dict]:
    w = wl.get(name)
    xs = [x.cuda() for x in w.inputs(cfg, 0, "float16")]
    want = w.reference(*[x.float() for x in xs])
    copies = input_copies(xs)
    splits, loop = default_split(cfg["h"])
    rows = []
    for s, lp in ((splits, loop), (splits * 2, loop // 2)):
        for partials in (False, True):
            fn = compile_graph(w.fused(cfg, splits=s, loop=lp, partials=partials))
            outs = [fn(*xs)[0].clone() for _ in range(repeats)]
            distinct = len({o.cpu().numpy().tobytes() for o in outs})
            err = ((outs[0].float() - want).abs().max() / want.abs().max()).item()
            rows.append({"workload": name, "config": cfg, "splits": s, "loop": lp,
                         "form": "partials + group_sum" if partials else "atomic adds", **timings(fn, copies),
                         "distinct_outputs": distinct, "rel_err": err})
    return rows


def table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        atomic = next(a for a in rows if a["workload"] == r["workload"] and a["config"] == r["config"]
                      and a["splits"] == r["splits"])
        cells.append([r["workload"], r["config"]["h"], f"{r['splits']}x{r['loop']}", r["form"], f"{r['graph_us']:.1f}",
                      f"{r['called_us']:.1f}", f"{r['graph_us'] / atomic['graph_us']:.2f}x", r["distinct_outputs"],
                      f"{r['rel_err']:.1e}"])
    return markdown_table(["workload", "h", "splits x loop", "form", "graph µs", "called µs", "graph vs atomic",
                           "distinct outputs", "rel. err"], cells)


def kernel_times(calls: int = 50) -> str:
    """torch.profiler's table of each form's kernels at Attention's largest config, default split."""
    w = wl.get("attention")
    cfg = w.configs[-1]
    xs = [x.cuda() for x in w.inputs(cfg, 0, "float16")]
    out = []
    for partials in (False, True):
        prof = kernel_profile(compile_graph(w.fused(cfg, partials=partials)), xs, calls, warmup=5)
        out += ["partials + group_sum" if partials else "atomic adds",
                prof.key_averages().table(sort_by="cuda_time_total", row_limit=8)]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="runs on one input, for the bit-identity count")
    ap.add_argument("--out", default="split_kv_partials.json", help="JSON file for every figure")
    ap.add_argument("--kernels", default="", help="also write the forms' kernel times (torch.profiler) here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("split_kv_partials: needs a CUDA GPU")
    rows = [r for name in ("attention", "qk_attention") for cfg in wl.get(name).configs
            for r in measure(name, cfg, args.repeats)]
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    if args.kernels:
        with open(args.kernels, "w") as f:
            f.write(kernel_times())
    print(table(rows))


if __name__ == "__main__":
    main()
