"""tools/property_tests.py runs the properties at the profile it is given and passes pytest's exit code on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROPERTIES = "tests/index/test_rerank_properties.py"


def test_the_script_runs_the_properties_at_the_given_profile() -> None:
    done = subprocess.run(
        # One file's properties in one process: `-n 0`, as xdist's workers would each import the whole stack first.
        [sys.executable, "tools/property_tests.py", "--profile", "dev", "--", "-n", "0", PROPERTIES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "Hypothesis Statistics" in done.stdout and " passing, 0 failing" in done.stdout
    assert "profile dev: pytest exit 0" in done.stdout
