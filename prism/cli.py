"""The `prism` command line. Errors end as one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import torch

from prism.errors import PrismError

__all__ = ["main"]


def _check(args: argparse.Namespace) -> int:
    """Run each workload's hand-written fused µGraph in the reference executor; compare with torch."""
    from prism import interp, workloads

    names = args.workloads or workloads.names()
    print(f"{'workload':<14} {'config':<22} {'kernels':>7} {'max |err|':>10} {'executor s':>10}  result")
    failed = 0
    for name in names:
        w = workloads.get(name)
        if not 0 <= args.config < len(w.configs):
            raise PrismError(f"--config {args.config}: {name} has configs 0..{len(w.configs) - 1}")
        cfg = w.configs[args.config]
        inputs = w.inputs(cfg, seed=0, dtype=torch.float32)
        fused = w.fused(cfg)
        start = time.perf_counter()
        (got,) = interp.run(fused, inputs)
        seconds = time.perf_counter() - start
        want = w.reference(*inputs)
        err = (got - want).abs().max().item()
        ok = torch.allclose(got, want, rtol=1e-4, atol=1e-4)
        failed += not ok
        kernels = sum(n.op == "custom" for n in fused.nodes)
        cfg_text = ",".join(f"{k}={v}" for k, v in cfg.items())
        print(f"{name:<14} {cfg_text:<22} {kernels:>7} {err:>10.2e} {seconds:>10.2f}  {'ok' if ok else 'MISMATCH'}")
    print(f"{len(names) - failed} of {len(names)} fused kernels match torch (float32, rtol=atol=1e-4)")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prism", description="Prism: a symbolic superoptimizer for "
                                     "tensor programs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser("check", help="run each workload's hand-written fused kernel in the reference "
                           "executor and compare it with torch (the default command)")
    check.add_argument("workloads", nargs="*", help="workload names (default: all five)")
    check.add_argument("--config", type=int, default=0, help="which of the workload's configs (default 0)")
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["check", *(argv or [])])
    try:
        return {"check": _check}[args.command](args)
    except PrismError as e:
        print(f"prism: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
