"""Time e-graph checks on workload-sized expressions: median and worst ms per check, equal and not.

Run: python benchmarks/verify_speed.py [--n 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from prism.verify.egraph import check
from prism.verify.expr import Term, Var, bcast, comb, div, exp, matmul, mul, part, red, repl, scale, silu, sqrt, square, sum_


def rmsnorm() -> tuple[Term, Term]:
    """O = rms_norm(X) @ W, fused: grid x over W's columns, loop over the hidden dim."""
    X, W, c = Var("X"), Var("W"), 1 / 4096
    xl, wl = part(repl(X, "x0"), 0, "i0"), part(part(W, 0, "x0"), 1, "i0")
    cand = comb(div(red(matmul(xl, wl), "i0"), bcast(sqrt(scale(red(sum_(square(xl), 0), "i0"), c)), 0)), 0, "x0")
    ref = matmul(div(X, bcast(sqrt(scale(sum_(square(X), 0), c)), 0)), W)
    return cand, ref


def swiglu() -> tuple[Term, Term]:
    """O = silu(X @ Wg) * (X @ Wu), fused over W's columns and the hidden dim."""
    X, Wg, Wu = Var("X"), Var("Wg"), Var("Wu")
    xl = part(repl(X, "x0"), 0, "i0")
    g = red(matmul(xl, part(part(Wg, 0, "x0"), 1, "i0")), "i0")
    u = red(matmul(xl, part(part(Wu, 0, "x0"), 1, "i0")), "i0")
    return comb(mul(silu(g), u), 0, "x0"), mul(silu(matmul(X, Wg)), matmul(X, Wu))


def attention() -> tuple[Term, Term]:
    """softmax(Q @ Kt) @ V with the grid over the batch and the loop over the kv length."""
    Q, K, V = Var("Q"), Var("K"), Var("V")
    ql, kl, vl = repl(part(Q, 2, "x0"), "i0"), part(part(K, 2, "x0"), 0, "i0"), part(part(V, 2, "x0"), 1, "i0")
    e = exp(matmul(ql, kl))
    cand = comb(div(red(matmul(e, vl), "i0"), bcast(red(sum_(e, 0), "i0"), 0)), 2, "x0")
    s = exp(matmul(Q, K))
    return cand, matmul(div(s, bcast(sum_(s, 0), 0)), V)


def time_pair(name: str, lhs: Term, rhs: Term, n: int) -> None:
    times, res = [], None
    for _ in range(n):
        t = time.perf_counter()
        res = check(lhs, rhs)
        times.append((time.perf_counter() - t) * 1e3)
    print(f"{name:28s} equal={res.equal!s:5s} median {statistics.median(times):6.2f} ms  max {max(times):6.2f} ms"
          f"  iters {res.stats['iterations']:3d}  nodes {res.stats['nodes']:5d}  ({res.reason})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="checks per pair")
    n = ap.parse_args().n
    for name, (cand, ref) in [("rmsnorm", rmsnorm()), ("swiglu", swiglu()), ("attention", attention())]:
        time_pair(name, cand, ref, n)
        wrong = Term(cand.op, cand.args, (cand.attrs[0] ^ 1,) + cand.attrs[1:]) if cand.op == "comb" else cand
        time_pair(name + " (wrong comb dim)", wrong, ref, max(1, n // 4))


if __name__ == "__main__":
    main()
