"""Time e-graph checks on workload-sized expressions: median and worst ms per check, equal and not.

Run: python benchmarks/verify_speed.py [--n 200]

A single check pays fixed costs (egglog push/pop, inserting the terms, one pass over every rule per
iteration) that dominate at these sizes; check_all shares them across candidates of one reference, so
the batched line is what verifying many candidates of a search costs per candidate.
"""

from __future__ import annotations

import argparse
import statistics
import time

from prism.verify.egraph import check, check_all
from prism.verify.expr import (
    Term, Var, bcast, comb, div, exp, matmul, mul, part, red, repl, scale, silu, sqrt, square, sum_,
)


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
    """Wall and CPU time per check (CPU time is what a busy shared machine distorts least)."""
    wall, cpu, res = [], [], None
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        res = check(lhs, rhs)
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    print(f"{name:34s} equal={res.equal!s:5s} wall median {statistics.median(wall):6.2f} ms"
          f" (min {min(wall):6.2f}, max {max(wall):6.2f})  cpu median {statistics.median(cpu):6.2f} ms"
          f"  iters {res.stats['iterations']:3d}  nodes {res.stats['nodes']:5d}  {res.reason}")


def variants(cand: Term) -> list[Term]:
    """Wrong candidates near a right one: each comb dim and each div swapped, as a search produces."""
    out = []
    for dim in (0, 1, 2):
        if dim != cand.attrs[0]:
            out.append(Term(cand.op, cand.args, (dim,) + cand.attrs[1:]))
    body = cand.args[0]
    if body.op == "div":
        out.append(Term(cand.op, (Term("div", body.args[::-1]),), cand.attrs))
    return out


def time_batch(name: str, cand: Term, ref: Term, n: int, size: int = 16) -> None:
    """Per-candidate time when `size` candidates (a quarter right) are checked against one reference."""
    wrong = variants(cand)
    cands = [cand if i % 4 == 0 else wrong[i % len(wrong)] for i in range(size)]
    per = []
    for _ in range(n):
        t = time.perf_counter()
        res = check_all(ref, cands)
        per.append((time.perf_counter() - t) * 1e3 / size)
    assert [r.equal for r in res] == [i % 4 == 0 for i in range(size)]
    print(f"{name + f' (batch of {size})':34s} per candidate: wall median {statistics.median(per):6.2f} ms"
          f" (min {min(per):6.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="checks per pair")
    n = ap.parse_args().n
    for name, (cand, ref) in [("rmsnorm", rmsnorm()), ("swiglu", swiglu()), ("attention", attention())]:
        time_pair(name, cand, ref, n)
        time_pair(name + " (wrong comb dim)", variants(cand)[0], ref, max(1, n // 4))
        time_batch(name, cand, ref, max(1, n // 10))


if __name__ == "__main__":
    main()
