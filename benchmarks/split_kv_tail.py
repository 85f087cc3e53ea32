"""The split-KV combine as a tail: kernel 2 launched on its own, or run by kernel 1's last blocks.

For each decode config of Attention, QK-Attention and GQA (fp16), the safe split-KV form (each split's online
sums and max side by side; kernel 2 rescales them to the largest max, adds and divides) at two split counts,
two ways: kernel 2 launched after kernel 1 (`w.fused(cfg, online=True, splits=S, loop=L, partials=True)`), and
kernel 2 run by the last block of each row of kernel 1 (`tail=True`, prism.codegen.tail: one launch). Columns:
the cost model's estimate with the shipped calibration (prism.tune.estimate, with the sm_90 compiler's
registers), the compiled kernels' registers and spills, and on a GPU both forms timed as called and in a
CUDA-graph replay (prism.tune.profile.timings), run --repeats times at logit standard deviation 30 (distinct
outputs: 1 means bit-identical runs; error against torch's float32 attention). Without a GPU the GPU
columns say "-".

    python benchmarks/split_kv_tail.py [--repeats 20] [--out split_kv_tail.json]
"""

from __future__ import annotations

import argparse
import json

import torch

import prism.workloads as wl
from prism.bench.paper_report import markdown_table
from prism.bench.paper_search import config_text
from prism.codegen import compile_graph
from prism.tune import estimate
from prism.tune.profile import input_copies, timings
from prism.tune.target import get_target
from prism.workloads.attention import default_split, logit_scales

CONFIGS = {"attention": (0, 1), "qk_attention": (0, 1), "gqa": (0, 1, 2)}
"""The decode configs (workload: config indices): GQA's fourth is a prefill."""


def measure(name: str, cfg: dict[str, int], repeats: int, gpu: bool) -> list[dict]:
    w = wl.get(name)
    target = get_target("h100")
    splits, loop = default_split(cfg["h"])
    if gpu:
        xs = [x.cuda() for x in w.inputs(cfg, 0, "float16")]
        big = [x.cuda() for x in w.inputs(cfg, 0, "float16", scales=logit_scales(cfg, 30.0))]
        want = w.reference(*[x.float() for x in big])
        copies = input_copies(xs)
    rows = []
    for s, lp in ((splits, loop), (splits * 2, loop // 2)):
        for tail in (False, True):
            graph = w.fused(cfg, online=True, splits=s, loop=lp, partials=True, tail=tail)
            fn = compile_graph(graph)
            aot = fn.aot()
            row = {"workload": name, "config": cfg, "splits": s, "loop": lp, "form": "tail" if tail else "two kernels",
                   "kernels": len(aot), "estimate_us": estimate(graph, target, aot=aot).seconds * 1e6,
                   "registers": [k.registers for k in aot], "spills": any(k.spills for k in aot)}
            if gpu:
                outs = [fn(*big)[0].clone() for _ in range(repeats)]
                row |= timings(fn, copies)
                row |= {"distinct_outputs": len({o.cpu().numpy().tobytes() for o in outs}),
                        "rel_err_at_std30": ((outs[0].float() - want).abs().max() / want.abs().max()).item()}
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    def num(r: dict, key: str, fmt: str = "{:.1f}") -> str:
        return fmt.format(r[key]) if key in r else "-"

    cells = []
    for r in rows:
        two = next(a for a in rows if a["workload"] == r["workload"] and a["config"] == r["config"]
                   and a["splits"] == r["splits"] and a["form"] == "two kernels")
        ratio = f"{r['graph_us'] / two['graph_us']:.2f}x" if "graph_us" in r else "-"
        cells.append([r["workload"], config_text(r["config"]), f"{r['splits']}x{r['loop']}", r["form"],
                      f"{r['estimate_us']:.2f}", "/".join(map(str, r["registers"])) + (" (spills)" if r["spills"] else ""),
                      num(r, "graph_us"), num(r, "called_us"), ratio, num(r, "distinct_outputs", "{}"),
                      num(r, "rel_err_at_std30", "{:.1e}")])
    return markdown_table(["workload", "config", "splits x loop", "form", "model µs", "registers", "graph µs", "called µs",
                           "graph vs two kernels", "distinct outputs", "rel. err at std 30"], cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="runs on one input, for the bit-identity count")
    ap.add_argument("--out", default="split_kv_tail.json", help="JSON file for every figure")
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    rows = [r for name, picks in CONFIGS.items() for k in picks
            for r in measure(name, wl.get(name).configs[k], args.repeats, gpu)]
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name() if gpu else "cpu (cost model and sm_90 compile only)",
                   "rows": rows}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
