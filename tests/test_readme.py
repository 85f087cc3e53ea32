"""Every ```python block of README.md runs as pasted: saved as a file and piped to `python -`, from a folder
that is not the checkout (only the import path leads there), in the caller's environment. A newcomer's
first copy-paste must not end in a NameError. A block fenced ```python gpu runs where torch sees a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```python( gpu)?\n(.*?)^```$", re.S | re.M)


def _blocks() -> list:
    """One pytest param per block, named by its line and section (`L91-worked-example-rmsnorm-linear`)."""
    params = []
    for m in FENCE.finditer(README):
        line = README.count("\n", 0, m.start()) + 1
        section = re.findall(r"^## (.*)$", README[:m.start()], re.M)[-1]
        slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")[:40]
        gpu = [pytest.mark.skipif(not torch.cuda.is_available(), reason="a block for a GPU")] if m.group(1) else []
        params.append(pytest.param(m.group(2), id=f"L{line}-{slug}", marks=gpu))
    return params


def test_every_python_block_is_found():
    assert len(_blocks()) == README.count("```python") > 0


@pytest.mark.parametrize("how", ["file", "stdin"])
@pytest.mark.parametrize("code", _blocks())
def test_a_readme_block_runs_as_pasted(code, how, tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)  # the result cache too: a block's second run finds it warm
    if how == "file":
        (tmp_path / "snippet.py").write_text(code)
        argv, stdin = [sys.executable, "snippet.py"], None
    else:
        argv, stdin = [sys.executable, "-"], code
    p = subprocess.run(argv, input=stdin, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]


def test_a_block_that_superoptimizes_makes_its_tensors_where_the_kernels_run():
    """On a GPU machine superoptimize tunes for the GPU and its result takes CUDA tensors only: a block that
    made CPU tensors after it passed on a CPU and failed on the H200 (2026-11-26). Each tensor a block makes
    after `superoptimize(` names its device (`opt.device`), so the block runs on either machine."""
    making = re.compile(r"torch\.(randn|rand|zeros|ones|empty)\(|\.inputs\(")
    for param in _blocks():
        if param.marks:          # a block for a GPU makes CUDA tensors
            continue
        code = param.values[0]
        after = code.split("superoptimize(", 1)[1] if "superoptimize(" in code else ""
        for line in after.splitlines():
            assert not making.search(line) or "device" in line, f"{param.id}: {line.strip()}"
