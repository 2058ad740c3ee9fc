"""`native_stdout_discarded`: what C code prints to file descriptor 1 in the block is dropped, the rest kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = """
import ctypes, os
from retrieval.runtime.native_output import native_stdout_discarded
libc = ctypes.CDLL(None)
libc.printf(b"before\\n")
with native_stdout_discarded():
    libc.printf(b"inside\\n")  # buffered by C: must not reach the terminal after the block either
    os.write(2, b"error\\n")
libc.printf(b"after\\n")
"""


def test_c_output_inside_the_block_is_dropped_and_stderr_kept() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
    assert done.stdout == "before\nafter\n"
    assert done.stderr == "error\n"


def test_a_process_without_stdout_runs_the_block() -> None:
    script = "import os\nos.close(1)\n" + _SCRIPT.replace('libc.printf(b"before\\n")', "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
