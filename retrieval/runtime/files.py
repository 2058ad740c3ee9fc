"""Writing files so that a killed process never leaves a half-written one: `atomic_write` and `append_line`.

Every file the toolkit writes goes through here: checkpoints, run records, reports, embeddings
files, CSVs. A whole file is written to a temporary name beside its destination, flushed to disk
and renamed over it (a rename within a folder is atomic on POSIX), so readers see the old file
or the new one, never a mix. Line logs (`metrics.jsonl`) grow by whole lines instead.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["append_line", "atomic_write", "file_sha256", "sampled_sha256", "write_text"]


@contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write to; on success it replaces `path`, on error it is removed.

    The temporary name is hidden and carries the process id, so two processes never share one.
    Libraries that write by path (`torch.save`, `faiss.write_index`, `np.save`) write to the
    yielded path; the data is flushed to disk before the rename.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> with atomic_write(folder / "out.txt") as temporary:
        ...     _ = temporary.write_text("done")
        >>> (folder / "out.txt").read_text(), sorted(p.name for p in folder.iterdir())
        ('done', ['out.txt'])
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        _fsync(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (UTF-8)."""
    with atomic_write(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def append_line(path: str | Path, line: str) -> None:
    """Append one line (a newline is added) and flush it to disk, so a kill loses at most the line being written."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line.rstrip("\n") + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sampled_sha256(path: str | Path, blocks: int = 16, block_size: int = 1 << 16) -> str:
    """sha256 of a file's size and `blocks` evenly spaced blocks of `block_size` bytes (the whole file when smaller).

    A fingerprint that costs the same on a 100 GB file as on a small one (about 1 MiB read), for
    telling whether two machines hold the same file where reading it whole is the cost to avoid.
    It tells apart files of other sizes or contents in any sampled block (their header and first
    rows included); an edit confined to the bytes between two blocks goes unseen.
    """
    size = Path(path).stat().st_size
    if size <= blocks * block_size:
        return hashlib.sha256(size.to_bytes(8, "little") + Path(path).read_bytes()).hexdigest()
    digest = hashlib.sha256(size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        for number in range(blocks):  # the first block at 0, the last ending at the end of the file
            handle.seek(number * (size - block_size) // (blocks - 1))
            digest.update(handle.read(block_size))
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush a written file's data to disk (a no-op where the file system does not support it)."""
    with open(path, "rb") as handle:
        try:
            os.fsync(handle.fileno())
        except OSError:
            pass
