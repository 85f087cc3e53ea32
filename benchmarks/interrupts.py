"""Ctrl-C at random moments of `prism tune` and `prism optimize`: each run must end with exit 130 within 2 s.

A terminal sends SIGINT to the command's whole process group; so does this script, after a delay drawn
(seeded) between the start and a little past the command's usual length, so that interrupts land in imports,
in the search's and the tuner's worker pools, in compiles and in the numeric checks alike. A search result for
the tune runs is made first. Prints one row per command and writes every run as JSON:

    python benchmarks/interrupts.py [--runs 50] [--workload rmsnorm] [--out interrupts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 2.0
"""The longest a run may take to end after its Ctrl-C."""


def interrupted(argv: list[str], delay: float, cwd: Path, env: dict[str, str]) -> dict:
    """`python -m prism *argv` in its own process group, sent SIGINT after `delay` seconds: its exit code, the
    seconds it took to end after the signal (None: it had ended before), and its stderr's last line."""
    proc = subprocess.Popen([sys.executable, "-m", "prism", *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        proc.wait(timeout=delay)
        took = None
    except subprocess.TimeoutExpired:
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        took = time.monotonic() - sent
    err = proc.stderr.read() if proc.stderr else ""
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip()]
    return {"argv": argv, "delay_s": delay, "code": proc.returncode, "took_s": took,
            "last_line": lines[-1] if lines else "", "traceback": "Traceback" in err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50, help="interrupts per command")
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="interrupts.json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", ""))
                                                            if p), "PRISM_CACHE_DIR": str(work / "cache")}
        subprocess.run([sys.executable, "-m", "prism", "search", args.workload, "--quiet"], cwd=work, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        commands = {"tune": ["tune", f"prism-out/{args.workload}/search.json", "--no-cache"],
                    "optimize": ["optimize", args.workload, "--no-cache"]}
        lengths = {}
        for name, argv in commands.items():   # how long an uninterrupted run takes: the delays span it
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "prism", *argv, "--quiet"], cwd=work, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            lengths[name] = time.monotonic() - start
        runs = [interrupted(argv, rng.uniform(0.2, lengths[name] * 1.1), work, env) | {"command": name}
                for _ in range(args.runs) for name, argv in commands.items()]
    Path(args.out).write_text(json.dumps({"workload": args.workload, "seed": args.seed, "lengths_s": lengths,
                                          "runs": runs}, indent=1) + "\n")
    print(f"{args.runs} interrupts per command at random moments ({args.workload}; uninterrupted: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in lengths.items()) + ")")
    print("| command | interrupted | exit 130 | within 2 s | slowest s | ended before the signal | tracebacks |")
    print("|---|---|---|---|---|---|---|")
    for name in commands:
        mine = [r for r in runs if r["command"] == name]
        hit = [r for r in mine if r["took_s"] is not None]
        print(f"| {name} | {len(hit)} | {sum(r['code'] == 130 for r in hit)} | "
              f"{sum(r['took_s'] < LIMIT_S for r in hit)} | {max((r['took_s'] for r in hit), default=0):.2f} | "
              f"{len(mine) - len(hit)} | {sum(r['traceback'] for r in mine)} |")


if __name__ == "__main__":
    main()
