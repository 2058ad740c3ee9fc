"""One writer at a time per index directory: an OS file lock held across load, change and save.

The lock is `fcntl.flock` on `.NAME.lock` beside the index directory `NAME`, not inside it: a
save swaps the whole directory for a new one (see `storage.py`), so a lock file inside would move
with the old copy and be deleted, and the next writer would lock a different file. Beside it, the
lock file keeps its inode for ever; it is never deleted (unlinking a lock file lets a waiter lock
an orphaned inode). Its content is the holder's pid, so a writer that gives up can name it; it is
written in place, not through `runtime.files.atomic_write`, because the lock lives on the inode.

Readers (`query`, `serve`) take no lock: they see the previous directory or the new one, whole.
The kernel releases the lock when its holder exits, however it dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from retrieval.errors import UserError

__all__ = ["DEFAULT_LOCK_TIMEOUT", "lock_path", "writer_lock"]

DEFAULT_LOCK_TIMEOUT = 60.0  # seconds a second writer waits before giving up
_POLL_SECONDS = 0.02


def lock_path(directory: str | Path) -> Path:
    """The lock file of the index directory `directory`: `.NAME.lock` in its parent folder."""
    target = Path(directory).absolute()
    return target.parent / f".{target.name}.lock"


@contextmanager
def writer_lock(directory: str | Path, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the writer lock of the index directory `directory` (which need not exist yet).

    Waits up to `timeout` seconds (0: one try) for another writer to finish; the order in
    which waiters get the lock is not guaranteed.

    Raises:
        UserError: another process held the lock for all of `timeout`; names its pid when known.
        OSError: the lock file cannot be created (a read-only or unwritable parent folder).
    """
    path = lock_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        _acquire(descriptor, Path(directory), timeout)
        _record_holder(descriptor, str(os.getpid()))
        try:
            yield
        finally:
            _record_holder(descriptor, "")
    finally:
        os.close(descriptor)  # releases the lock


def _acquire(descriptor: int, directory: Path, timeout: float) -> None:
    """Take the exclusive lock on `descriptor`, polling until `timeout` seconds have passed."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise UserError(_busy_message(directory, _holder(descriptor), timeout)) from None
            time.sleep(_POLL_SECONDS)


def _record_holder(descriptor: int, text: str) -> None:
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, text.encode(), 0)


def _holder(descriptor: int) -> int | None:
    """The pid the lock file names, if it is a number (it is empty between two writers)."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _busy_message(directory: Path, pid: int | None, timeout: float) -> str:
    holder = f"process {pid}" if pid is not None else "another process"
    return (
        f"index {directory} is being written by {holder}: gave up after waiting {timeout:g} s for its lock; "
        "retry when that writer has finished, or wait longer with --lock-timeout"
    )
