"""`native_stdout_discarded`: drop what C and C++ code prints to standard output while a block runs.

FAISS prints progress with `printf` from C++ (`OnDiskInvertedLists` announces every file it
resizes) and has no flag to stop it; Python's `sys.stdout` never sees those bytes, so only
pointing file descriptor 1 elsewhere keeps a command's output to its own lines.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["native_stdout_discarded"]


@contextmanager
def native_stdout_discarded() -> Iterator[None]:
    """Point file descriptor 1 at the null device while the block runs, C's buffer flushed on both sides.

    Anything written to the process's standard output in the block is lost, Python's `print` from
    other threads included; standard error is left alone, so errors still show. A process without
    a descriptor 1 (closed by a service manager) runs the block as it is.
    """
    if sys.stdout is not None:
        sys.stdout.flush()
    libc = ctypes.CDLL(None)
    libc.fflush(None)  # what C printed before the block goes where it was going
    try:
        saved = os.dup(1)
    except OSError:  # no standard output to protect
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        libc.fflush(None)  # what C printed in the block, still buffered, goes to the null device
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
