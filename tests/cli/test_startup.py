"""`import prism` and `prism --help` import nothing heavy (no torch, no egglog); the public names still
work, each imported on first use, and `prism.search` stays the function."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.child import child_env

ROOT = Path(__file__).resolve().parents[2]
HEAVY = "sorted(m for m in ('torch', 'egglog', 'triton', 'matplotlib') if m in sys.modules)"


def _python(code: str, tmp_path: Path) -> str:
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=child_env(tmp_path))
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_help_imports_nothing_heavy(tmp_path):
    out = _python("import sys, contextlib, io\nfrom prism.cli import main\n"
                  "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                  "    main(['--help'])\n"
                  f"print({HEAVY})", tmp_path)
    assert out == "[]"


PUBLIC = ["prism.KernelGraph", "prism.BlockGraph", "prism.SearchResult", "prism.OptimizedGraph",
          "prism.superoptimize", "prism.verify.equivalent", "prism.interp.run", "prism.errors.InputError"]


def test_the_public_api_is_there_on_first_use(tmp_path):
    out = _python(f"import sys, prism\nprint({HEAVY})\n"
                  "import prism.search.driver  # binds the subpackage to prism.search, but for prism's guard\n"
                  "print(prism.search.__module__, prism.search.__name__, prism.workloads.names()[0])\n"
                  f"print(*(x.__name__ for x in ({', '.join(PUBLIC)})))", tmp_path)
    assert out.splitlines() == ["[]", "prism.search.driver search rmsnorm",
                                " ".join(name.rsplit(".", 1)[1] for name in PUBLIC)]


def test_the_help_names_every_workload():
    import prism.workloads as wl
    from prism.cli import WORKLOAD_NAMES

    assert WORKLOAD_NAMES.split(", ") == wl.names()
