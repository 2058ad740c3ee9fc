"""Importing the library changes no process-wide setting: the caller's matplotlib backend stays theirs.

Each check runs in a fresh interpreter, so modules already imported by other tests cannot hide an
import-time side effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

_IMPORT_EVERYTHING = """
import json, pkgutil, importlib, sys
import matplotlib
matplotlib.use("svg")
before = matplotlib.get_backend()
import retrieval
modules = [m.name for m in pkgutil.walk_packages(retrieval.__path__, "retrieval.") if not m.name.endswith("__main__")]
for name in modules:
    importlib.import_module(name)
print(json.dumps({
    "before": before,
    "after": matplotlib.get_backend(),
    "pyplot": "matplotlib.pyplot" in sys.modules,
    "modules": len(modules),
}))
"""

_DRAW_A_RUN = """
import json, sys
from pathlib import Path
import matplotlib
from retrieval.report.plots import plot_run
written = plot_run(Path(sys.argv[1]))
print(json.dumps({"backend": matplotlib.get_backend(), "written": [str(p) for p in written]}))
"""


def _run(code: str, *args: str, backend: str) -> dict:
    env = {
        **os.environ,
        "MPLBACKEND": backend,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_every_module_keeps_the_matplotlib_backend():
    result = _run(_IMPORT_EVERYTHING, backend="svg")
    assert result["modules"] > 50  # the walk reached the whole package
    assert result["before"] == result["after"] == "svg"
    assert not result["pyplot"], "a retrieval module imports matplotlib.pyplot; draw with matplotlib.figure.Figure"


def test_drawing_plots_keeps_the_matplotlib_backend(tmp_path):
    records = [{"epoch": epoch, "loss": 1.0 / epoch, "lr": 0.1, "val/recall@1": 0.5 + epoch / 10} for epoch in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    result = _run(_DRAW_A_RUN, str(tmp_path), backend="pdf")
    assert result["backend"] == "pdf"
    assert [Path(path).name for path in result["written"]] == ["curves.png"]
    assert (tmp_path / "plots" / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["curves.png"]  # no temporary left behind
