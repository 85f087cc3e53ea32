"""How soon a compile says what it does: the README's Llama snippet, cold, with every "prism" log record timed.

    python benchmarks/compile_progress.py [--runs 1] [--out compile_progress.json]

Each run executes the first Python block of README.md as pasted, in a fresh process with an empty result cache
and Prism's log records (logger "prism", INFO) captured with their times. The clock starts when the compiled
forward is first called (the user's first call: Dynamo's capture, then Prism's backend). Prints per run the seconds
until the first record, the first region record and the summary, and writes every record as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, logging, sys, time
import torch

records, first_call = [], []

class Timed(logging.Handler):
    def emit(self, record):
        records.append([time.monotonic(), record.getMessage()])

logger = logging.getLogger("prism")
logger.setLevel(logging.INFO)
logger.addHandler(Timed())
compile_ = torch.compile

def timed_compile(fn, *args, **kwargs):   # the snippet's own call, its first call timed
    compiled = compile_(fn, *args, **kwargs)
    def called(*a, **k):
        if not first_call:
            first_call.append(time.monotonic())
        return compiled(*a, **k)
    return called

torch.compile = timed_compile
exec(sys.argv[1], {"__name__": "__main__"})
end = time.monotonic()
json.dump({"records": [[t - first_call[0], m] for t, m in records], "total_s": end - first_call[0]},
          open(sys.argv[2], "w"))
"""


def snippet() -> str:
    """The README's first Python block, as a user pastes it."""
    return re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def run_once(work: Path) -> dict:
    out = work / "run.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "PRISM_CACHE_DIR": str(work / "cache")}
    subprocess.run([sys.executable, "-c", CHILD, snippet(), str(out)], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text())
    times = [t for t, _ in doc["records"]]
    region = [t for t, m in doc["records"] if re.match(r"prism: region \d+/\d+", m)]
    summary = [t for t, m in doc["records"] if re.match(r"prism: \d+ region\(s\) fused", m)]
    return doc | {"first_record_s": min(times, default=None), "first_region_s": min(region, default=None),
                  "first_summary_s": min(summary, default=None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", default="compile_progress.json")
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(run_once(Path(tmp)))
    Path(args.out).write_text(json.dumps({"snippet": "README.md, its first Python block", "cpus": os.cpu_count(),
                                          "runs": runs}, indent=1) + "\n")
    print("README's Llama, cold: seconds after the first call of the compiled forward")
    for key in ("first_record_s", "first_region_s", "first_summary_s", "total_s"):
        values = [r[key] for r in runs if r[key] is not None]
        print(f"  {key:16s} median {statistics.median(values):7.2f}  runs {[round(v, 2) for v in values]}"
              if values else f"  {key:16s} none")


if __name__ == "__main__":
    main()
