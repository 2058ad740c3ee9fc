"""`LiveIndex`: the served index follows its directory, so `index add`/`remove` need no restart.

Every save of an index replaces its directory as a whole (a new directory swapped in atomically,
see `retrieval.index.storage`), so a changed manifest inode or mtime is a cheap, certain sign of a
new version. A request notices it (one `stat` at most every `interval` seconds) and a background
thread loads the new version while requests keep using the current one; the new one is swapped
in with one assignment. A request holds the `IndexView` it started with until it ends, so it
never mixes two versions. A version that fails to load (a save in progress, a damaged copy) is
logged and retried when the directory changes again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, TypeVar

from retrieval.errors import UserError

__all__ = ["LiveIndex", "Signature", "pinned_directory", "signature_of"]

_log = logging.getLogger(__name__)

Signature = tuple[int, ...]
View = TypeVar("View")


def signature_of(directory: Path) -> Signature | None:
    """What changes whenever the index in `directory` is saved: the directory's and manifest's inodes and mtimes."""
    try:
        folder, manifest = directory.stat(), (directory / "manifest.json").stat()
    except OSError:
        return None  # mid-swap on a system without an atomic exchange, or removed: look again later
    return (folder.st_dev, folder.st_ino, manifest.st_ino, manifest.st_mtime_ns, manifest.st_size)


@contextmanager
def pinned_directory(directory: Path) -> Iterator[Path]:
    """A path that keeps naming the directory `directory` names now, even if a save swaps another in.

    Loading reads several files; through the pinned path they all come from one version, or the
    load fails (the old version's files were deleted) and is retried. Linux (`/proc/self/fd`);
    elsewhere the plain path.
    """
    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        yield directory  # missing or not a directory: the loader says which, in its own words
        return
    try:
        proc = Path(f"/proc/self/fd/{descriptor}")
        yield proc if proc.is_dir() else directory
    finally:
        os.close(descriptor)


class LiveIndex(Generic[View]):
    """The current view of an index directory, reloaded in the background when the directory changes.

    Args:
        directory: the index directory.
        load: `load(path, previous)` -> a view of the index at `path` (a pinned path; `previous`
            is the view being replaced, None at first, so that a loader can reuse its parts).
        interval: seconds between two looks at the directory; 0 never reloads.

    Raises:
        UserError: the first load fails (from `load`).
    """

    def __init__(self, directory: str | Path, load: Callable[[Path, View | None], View], interval: float) -> None:
        if interval < 0:
            raise ValueError(f"interval must be >= 0 seconds, got {interval}")
        self.directory = Path(directory)
        self.interval = interval
        self.generation = 0  # successful reloads so far
        self._load = load
        self._reloading = threading.Lock()
        self._failed: Signature | None = None
        self._next_check = time.monotonic() + interval
        with pinned_directory(self.directory) as path:
            self._signature = signature_of(path)
            self._view = load(path, None)

    def current(self) -> View:
        """The view to answer one request with; looks at the directory when `interval` has passed."""
        if self.interval > 0 and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + self.interval
            self._reload_if_changed()
        return self._view

    def _reload_if_changed(self) -> None:
        signature = signature_of(self.directory)
        if signature is None or signature in (self._signature, self._failed):
            return
        if self._reloading.acquire(blocking=False):  # one reload at a time; the others keep the current view
            threading.Thread(target=self._reload, name="index-reload", daemon=True).start()

    def _reload(self) -> None:
        signature = None
        try:
            with pinned_directory(self.directory) as path:
                signature = signature_of(path)
                view = self._load(path, self._view)
        except UserError as exc:
            self._failed = signature
            _log.warning(
                "index %s changed but cannot be loaded yet (%s); still serving the previous one", self.directory, exc
            )
        except Exception:
            self._failed = signature
            _log.exception("reloading index %s failed; still serving the previous one", self.directory)
        else:
            self._view, self._signature = view, signature
            self.generation += 1
            _log.info("index %s reloaded (version %d)", self.directory, self.generation)
        finally:
            self._reloading.release()
