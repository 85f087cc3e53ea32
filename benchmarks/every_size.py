"""Decode attention at KV lengths that are not powers of two, through one DynamicGraph.

For each KV length that is no power of two (513, 1000, 4097, 5000) and the power of two above it, in one process
on one GPU: the attention program (fp16, batch·heads 32, one query row, head dim 128) is superoptimized once
with its KV length dynamic (`superoptimize(..., dynamic={"kv": ["Kt.2", "V.1"]})`), then timed at each length,
as called and as a CUDA-graph replay, beside `torch.nn.functional.scaled_dot_product_attention` at the same
shapes. The goal: at each odd length, Prism within 1.15x of its time at the next power of two scaled by the
length ratio, and ahead of SDPA. Needs a CUDA GPU (one line and exit 1 without one):

    python benchmarks/every_size.py [--out every_size.json] [--budget 16]

`--model` asks the cost model instead, on the CPU: the same DynamicGraph (on the CPU), and at each odd length
and at both powers of two around it, the model's estimate on `--target` of the µGraph the graph serves there
(`prism.tune.cost.estimate`, one calibration for every size). Two ratios per odd length n between p/2 and p:
against est(p) · n/p (length-scaled, as the GPU goal), and against the estimates of its neighbours joined by a
line, est(p/2) + (est(p) - est(p/2)) · (n - p/2) / (p/2): where launches and fixed costs dominate (a few µs
of a 2-row batch), time does not scale with length, and the first ratio reads ~2 at n = p/2 + 1 whatever is
chosen, while the second still asks that n cost what its neighbours do.

    python benchmarks/every_size.py --model [--config 2,8,128] [--target h100] [--out every_size.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout that is not installed
    sys.path.insert(0, str(ROOT))

LENGTHS = (513, 1000, 4097, 5000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="every_size.json")
    ap.add_argument("--budget", type=int, default=16, help="candidates tuned per size bucket")
    ap.add_argument("--model", action="store_true", help="the cost model's estimates, on the CPU")
    ap.add_argument("--config", default="32,1,128", help="batch·heads, query rows, head dim (default 32,1,128)")
    ap.add_argument("--target", default="h100", help="the GPU the model assumes (h100, h200)")
    args = ap.parse_args()
    try:
        b, g, d = (int(v) for v in args.config.split(","))
    except ValueError:
        sys.exit(f"every_size: --config must be three integers b,g,d, got {args.config!r}")
    cfg = {"b": b, "g": g, "h": 1024, "d": d}
    if args.model:
        return model(cfg, args)
    from prism.bench.gpu import GPUUnavailable, require_gpu

    try:
        require_gpu()
    except GPUUnavailable as e:
        sys.exit(f"every_size: {e}")
    import torch
    import torch.nn.functional as F

    import prism
    from prism.tune.profile import bench, bench_graph, input_copies

    w = prism.workloads.get("attention")
    dg = prism.superoptimize(w.build(cfg, "float16"), dynamic={"kv": ["Kt.2", "V.1"]}, budget=args.budget,
                             device="cuda")
    rows = []
    for kv in sorted({n for k in LENGTHS for n in (k, 1 << (k - 1).bit_length())}):
        q, kt, v = w.inputs(cfg | {"h": kv}, seed=0, dtype="float16")
        xs = [t.cuda() for t in (q, kt, v)]
        copies = input_copies(xs)
        want = torch.softmax(xs[0].float() @ xs[1].float(), -1) @ xs[2].float()
        (got,) = dg(*xs)
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)

        def sdpa(q, kt, v):
            return F.scaled_dot_product_attention(q.unsqueeze(1), kt.transpose(1, 2).unsqueeze(1), v.unsqueeze(1),
                                                  scale=1.0)
        opt = dg.at(*xs)
        rows.append({"kv": kv, "chosen": opt.report.best.label,
                     "prism_us": bench(lambda *a: opt(*a), copies) * 1e6,
                     "prism_graph_us": bench_graph(lambda *a: opt(*a), copies) * 1e6,
                     "sdpa_us": bench(sdpa, copies) * 1e6, "sdpa_graph_us": bench_graph(sdpa, copies) * 1e6})
    at = {r["kv"]: r for r in rows}
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "config": cfg, "rows": rows,
              "tunings": {str(k): n for k, n in dg.tunings.items()}}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"decode attention, fp16, {result['device']}: µs, do_bench medians (as called; CUDA-graph replay)")
    print("| kv | Prism called | Prism graph | SDPA called | SDPA graph | graph / (pow2 · kv/pow2) | chosen |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        p2 = 1 << (r["kv"] - 1).bit_length()
        scaled = at[p2]["prism_graph_us"] * r["kv"] / p2
        print(f"| {r['kv']} | {r['prism_us']:.1f} | {r['prism_graph_us']:.1f} | {r['sdpa_us']:.1f} | "
              f"{r['sdpa_graph_us']:.1f} | {r['prism_graph_us'] / scaled:.2f} | {r['chosen']} |")


def model(cfg: dict, args: argparse.Namespace) -> None:
    """The cost model's estimates of what one DynamicGraph serves at each length (module docstring)."""
    import warnings

    import prism
    from prism.tune.cost import estimate

    warnings.simplefilter("ignore", RuntimeWarning)      # "no GPU": this mode is the model's
    w = prism.workloads.get("attention")
    dg = prism.superoptimize(w.build(cfg, "float16"), dynamic={"kv": ["Kt.2", "V.1"]}, budget=args.budget,
                             device="cpu", target=args.target)
    est, chosen = {}, {}
    for kv in sorted({n for k in LENGTHS for n in (k, 1 << (k - 1).bit_length(), 1 << (k - 1).bit_length() - 1)}):
        opt = dg.at(*w.inputs(cfg | {"h": kv}, seed=0, dtype="float16"))
        est[kv], chosen[kv] = estimate(opt.graph, dg.buckets.target).seconds * 1e6, opt.report.best.label
    rows = []
    for n in LENGTHS:
        hi = 1 << (n - 1).bit_length()
        lo = hi // 2
        line = est[lo] + (est[hi] - est[lo]) * (n - lo) / (hi - lo)
        rows.append({"kv": n, "estimate_us": est[n], "below_us": est[lo], "above_us": est[hi], "chosen": chosen[n],
                     "scaled_ratio": est[n] / (est[hi] * n / hi), "neighbour_ratio": est[n] / line})
    result = {"target": dg.buckets.target.name, "config": cfg, "rows": rows,
              "estimates_us": {str(k): v for k, v in est.items()},
              "tunings": {str(k): n for k, n in dg.tunings.items()}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"decode attention {cfg}, fp16: the cost model's µs on {result['target']}")
    print("| kv | est | est at p/2 | est at p | / (est(p)·kv/p) | / neighbours' line | chosen |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kv']} | {r['estimate_us']:.2f} | {r['below_us']:.2f} | {r['above_us']:.2f} | "
              f"{r['scaled_ratio']:.2f} | {r['neighbour_ratio']:.2f} | {r['chosen']} |")


if __name__ == "__main__":
    main()
