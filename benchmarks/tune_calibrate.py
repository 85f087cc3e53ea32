"""Cost-model calibration on a GPU: how well do `prism.tune.cost` estimates rank measured kernel times?

Run (needs a CUDA GPU; refuses in one line without one):
    PYTHONPATH=. python benchmarks/tune_calibrate.py [--samples 48] [--out tune_calibrate.json] [--search-dir DIR]

For each workload config: a uniform sample of (sGraph, grid, loop) candidates (not the model's picks,
so the correlation is not flattered), compiled ahead of time (the compiler's registers and shared
memory go into the estimate), run once against the reference, then timed with do_bench medians over
rotated input copies. Reports Spearman's rank correlation between estimate and time, and the regret
of trusting the model: the measured time of the model's favourite over the fastest measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpu_bench import search_options  # noqa: E402  (the same search arguments)

from prism.bench.gpu import num_text, search_result  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="tune_calibrate.json")
    p.add_argument("--samples", type=int, default=48, help="candidates timed per config")
    p.add_argument("--workloads", default="")
    p.add_argument("--search-dir", default="")
    p.add_argument("--search-time-limit", type=float, default=900.0)
    p.add_argument("--max-block-ops", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from prism import workloads

    args.names = [n for n in args.workloads.split(",") if n] or workloads.names()
    return args


def format_table(rows: list[dict[str, Any]]) -> str:
    cols = ["workload", "config", "timed", "Spearman", "model's pick us", "fastest us", "regret"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cfg = ",".join(f"{k}={v}" for k, v in r["config"].items())
        regret = r["pick_us"] / r["best_us"] if r.get("pick_us") and r.get("best_us") else None
        lines.append(f"| {r['workload']} | {cfg} | {r.get('timed', 0)} | {num_text(r.get('spearman'), '{:+.2f}')} | "
                     f"{num_text(r.get('pick_us'))} | {num_text(r.get('best_us'))} | {num_text(regret, '{:.2f}x')} |")
    return "\n".join(lines)


def calibrate(name: str, cfg: dict, result, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from prism import workloads
    from prism.codegen import compile_graph
    from prism.tune import Space, estimate, spearman
    from prism.tune.compile import compile_many
    from prism.tune.profile import bench, close, input_copies
    from prism.tune.tuner import _gpu_target

    w = workloads.get(name)
    target = _gpu_target(None)
    space = Space(result, w.build(cfg, "float16"), target)
    cands = space.sample(args.samples, seed=args.seed)
    graphs = [space.instantiate(c) for c in cands]
    compiled = compile_many(graphs, arch=target.arch)
    xs = [x.cuda() for x in w.inputs(cfg, seed=args.seed, dtype="float16")]
    copies = input_copies(xs)
    want = w.reference(*[x.float() for x in xs])
    points = []
    for c, g, cr in zip(cands, graphs, compiled):
        point: dict[str, Any] = {"candidate": str(c)}
        if not cr.ok or cr.spills:
            point["dropped"] = cr.error or "spills"
        else:
            point["estimate_us"] = estimate(g, target, aot=cr.kernels).seconds * 1e6
            try:
                cg = compile_graph(g)
                ok, err = close(cg(*xs)[0], want)
                torch.cuda.synchronize()
                point["error"] = err
                if ok:
                    point["measured_us"] = bench(cg, copies) * 1e6
            except Exception as e:
                point["dropped"] = f"{type(e).__name__}: {str(e)[:200]}"
        points.append(point)
    timed = [p for p in points if "measured_us" in p]
    row = {"workload": name, "config": cfg, "points": points, "timed": len(timed),
           "spearman": spearman([p["estimate_us"] for p in timed], [p["measured_us"] for p in timed])}
    if timed:
        row["pick_us"] = min(timed, key=lambda p: p["estimate_us"])["measured_us"]
        row["best_us"] = min(p["measured_us"] for p in timed)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("tune_calibrate: no CUDA GPU visible to torch; nothing measured", file=sys.stderr)
        return 2
    from prism import workloads

    rows = []
    for name in args.names:
        result = search_result(name, search_options(args))
        for cfg in workloads.get(name).configs:
            rows.append(calibrate(name, cfg, result, args))
            Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                                 indent=1, default=str))
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
