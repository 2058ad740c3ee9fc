"""Replacing a whole directory so that a killed process leaves the old one or the new one, never a mix.

A writer fills a staging directory beside its target (`staging_directory`: `.NAME.PID.TOKEN.tmp`),
then `swap_in` exchanges the two with one atomic `renameat2(RENAME_EXCHANGE)` (Linux; two renames
elsewhere, where only the instant between them has no target). A staging copy that a killed writer
left behind is removed by the next writer of the same target, once no live process has its pid.
An index save (`retrieval.index.storage`) and an audit report (`retrieval.audit.report`) write so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from retrieval.errors import UserError

__all__ = ["refuse_file_in_the_way", "fsync_path", "staging_directory", "swap_in"]


def staging_directory(target: Path) -> Path:
    """A new empty `.NAME.PID.TOKEN.tmp` directory beside `target` (umask's mode), after removing killed writers'."""
    _remove_stale_copies(target)
    staging = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    os.mkdir(staging)
    return staging


def swap_in(staging: Path, target: Path) -> None:
    """Put `staging` at `target`; a previous `target` ends at `staging` (for the caller to remove)."""
    if not target.exists():
        os.rename(staging, target)
    elif not _exchange(staging, target):
        # No atomic exchange (not Linux): two renames; only the instant between them has no `target`.
        aside = staging.with_suffix(".old")
        os.rename(target, aside)
        os.rename(staging, target)
        os.rename(aside, staging)
    fsync_path(target.parent)


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's entries to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def refuse_file_in_the_way(path: Path, what: str) -> None:
    """Refuse a folder to write when a file stands at `path` or at its nearest existing parent (checked before work).

    Raises:
        UserError: `what` (how the message names the folder, e.g. `--out runs/x`) is a file or under one.
    """
    for candidate in (path, *path.parents):
        if candidate.exists():
            if candidate.is_dir():
                return
            where = "is a file" if candidate == path else f"is under the file {candidate}"
            raise UserError(f"{what} {where}; name a folder to write to (a new one is made)")


def _remove_stale_copies(target: Path) -> None:
    """Remove the temporary copies of `target` that killed writers left behind (their pid is not running).

    `.tmp` is a writer's new copy, `.old` the previous directory set aside where no atomic exchange exists.
    """
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.[0-9a-f]{{8}}\.(?:tmp|old)")
    for entry in target.parent.iterdir():
        match = pattern.fullmatch(entry.name)
        if match and not _running(int(match[1])):
            shutil.rmtree(entry, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(first: Path, second: Path) -> bool:
    """Atomically swap two paths with Linux `renameat2(RENAME_EXCHANGE)`; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # old kernel or a file system without it
        return False
    raise OSError(code, os.strerror(code), str(second))
