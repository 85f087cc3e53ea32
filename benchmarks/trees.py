"""Two Prism source trees side by side: the helper the *_compare benchmarks share.

Each job runs a child script in a fresh process that imports Prism from one tree (PYTHONPATH, working
directory the tree) and prints one JSON object last; the trees' runs alternate (old first in even rounds,
new first in odd ones), so that load from elsewhere on a shared machine falls on both alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

SIDES = ("before", "after")


def side_by_side(child: str, old: str, new: str, jobs: list[tuple[str, list[str]]], runs: int, out: Path,
                 say: Callable[[dict], str], fresh_triton_cache: bool = False) -> list[dict]:
    """Every job (a name and the child's arguments) `runs` times in both trees; each record is the child's
    JSON plus run, job and side, saved to OUT.json as they come. `fresh_triton_cache`: each run compiles
    into an empty Triton cache (what a first tuning costs)."""
    trees = {"before": str(Path(old).resolve()), "after": str(Path(new).resolve())}
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    for k in range(runs):
        for name, argv in jobs:
            for side in (SIDES if k % 2 == 0 else SIDES[::-1]):
                with tempfile.TemporaryDirectory(prefix="prism-triton-") as cache:
                    env = os.environ | {"PYTHONPATH": trees[side]}
                    if fresh_triton_cache:
                        env["TRITON_CACHE_DIR"] = cache
                    p = subprocess.run([sys.executable, "-c", child, *argv], capture_output=True, text=True,
                                       env=env, cwd=trees[side], check=True)
                rec = json.loads(p.stdout.strip().splitlines()[-1]) | {"run": k, "job": name, "side": side}
                records.append(rec)
                print(f"run {k} {name} {side}: {say(rec)}", file=sys.stderr)
                out.with_suffix(".json").write_text(json.dumps(records, indent=1))
    return records
