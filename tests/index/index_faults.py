"""Faults the index tests provoke: a real file-size limit (writes fail with EFBIG) and a lock held by another thread."""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from retrieval.index.locking import writer_lock


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes fail with EFBIG, as on a full disk (the soft limit; SIGXFSZ ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@contextlib.contextmanager
def lock_released_after(index: Path, seconds: float) -> Iterator[None]:
    """Another thread holds the index's writer lock on entry and lets it go `seconds` later."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with writer_lock(index):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    threading.Timer(seconds, release.set).start()
    try:
        yield
    finally:
        holder.join()
