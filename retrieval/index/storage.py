"""An index directory on disk: atomic writes, the manifest, and verification before FAISS reads a byte.

Layout of `INDEX_DIR/`: `index.faiss` (the FAISS index), `metadata.arrow` (Arrow IPC, see
`metadata.py`) and `manifest.json`, which records the format version, the index's shape and
settings, the model that made the embeddings, and the size and sha256 of every other file.

Saving writes a temporary directory beside the target, fsyncs every file and the directory, then
swaps it in with one atomic `renameat2(RENAME_EXCHANGE)` (Linux) so that a process killed at any
moment leaves either the previous index or the new one, both complete. The new directory and its
files keep the modes of the ones they replace (a server running as another user keeps reading
them). The temporary directory is named `.NAME.PID.TOKEN.tmp`: one that a killed save left
behind is removed by the next save, once no live process has that pid. Loading checks the
manifest, then every file's size and checksum, and only then lets `faiss.read_index` parse the
file: FAISS trusts its input and a damaged file can crash the process.

Saving does not lock: writers that may race each other hold `locking.writer_lock` across
load, change and save, inside `writing`, which words a failed write (a full disk, a read-only folder).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from retrieval.errors import UserError
from retrieval.runtime.directories import fsync_path, staging_directory, swap_in
from retrieval.runtime.files import file_sha256

if TYPE_CHECKING:
    from retrieval.index.manifest import FileEntry, IndexManifest
    from retrieval.validation import Record

    _Manifest = TypeVar("_Manifest", bound=Record)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "INDEX_FILE",
    "MANIFEST_FILE",
    "METADATA_FILE",
    "read_manifest",
    "read_verified_manifest",
    "working_directory",
    "write_index_directory",
    "writing",
]

FORMAT = "retrieval-index"
FORMAT_VERSION = 1
INDEX_FILE = "index.faiss"
METADATA_FILE = "metadata.arrow"
MANIFEST_FILE = "manifest.json"
_REQUIRED_KEYS = (
    "format",
    "version",
    "dimension",
    "metric",
    "normalized",
    "factory",
    "kind",
    "count",
    "next_id",
    "files",
)


def write_index_directory(
    directory: str | Path, writers: Mapping[str, Callable[[Path], None]], manifest: _Manifest
) -> _Manifest:
    """Write `directory` atomically: each `writers[name](path)` fills one file, then the manifest.

    The manifest (an index's or a trained index's, each with a `files` table) gets its `files`
    entry: the size and sha256 of each written file. An existing
    directory at `directory` is replaced as a whole, keeping its mode and its files' modes; if
    anything fails, or the process dies, it is left as it was.

    Returns:
        The manifest as written.

    Raises:
        OSError: the directory or its folder cannot be written (read-only, no permission) or the
            disk is full; the previous index is intact.
    """
    target = Path(directory).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "the index directory is read-only", str(target))
    staging = staging_directory(target)
    try:
        files = {}
        for name, write in writers.items():
            write(staging / name)
            files[name] = _describe(staging / name)
        written = {**manifest.model_dump(by_alias=True, exclude_unset=True), "files": files}
        manifest = type(manifest).model_validate(written)
        (staging / MANIFEST_FILE).write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
        _keep_modes(target, staging, [*files, MANIFEST_FILE])
        for path in (*(staging / name for name in files), staging / MANIFEST_FILE, staging):
            fsync_path(path)
        swap_in(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the new files on failure, the previous index on success
    return manifest


def read_verified_manifest(directory: str | Path) -> IndexManifest:
    """The manifest of `directory`, after checking it and the size and sha256 of every file it lists.

    Raises:
        UserError: saying exactly what is wrong: a missing directory or file, an unreadable or
            incomplete manifest, a field of the wrong type, a format newer than this toolkit, a
            truncated or grown file, a checksum mismatch.
    """
    manifest = read_manifest(directory)
    for name, expected in manifest.files.items():
        _verify(Path(directory) / name, expected)
    return manifest


def read_manifest(directory: str | Path) -> IndexManifest:
    """The manifest of `directory`, checked (fields, types, version, file names) but not the files it lists.

    For a quick look (the model an index was built with) before `read_verified_manifest` or `load`.

    Raises:
        UserError: as `read_verified_manifest`, but for the listed files' sizes and checksums.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"index directory not found: {directory}; build one with `retrieval index build`")
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        raise UserError(f"{manifest_path} is missing: {directory} is not a retrieval index (or its save was lost)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{manifest_path} is corrupt (not JSON: {exc}); rebuild the index") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{manifest_path} is not a retrieval index manifest; rebuild the index")
    missing = [key for key in _REQUIRED_KEYS if key not in manifest]
    if missing:
        raise UserError(f"{manifest_path} lacks {', '.join(missing)}; rebuild the index")
    from retrieval.index.manifest import IndexManifest  # pydantic: not for the command line's parsers

    checked = IndexManifest.read(manifest, manifest_path)
    version = checked.version
    if version < 1 or version > FORMAT_VERSION:
        raise UserError(
            f"{directory} has index format version {version!r}; this toolkit reads versions 1 to {FORMAT_VERSION}: "
            f"upgrade retrieval (written by {manifest.get('toolkit_version', 'an unknown version')})"
        )
    for name in (INDEX_FILE, METADATA_FILE):
        if name not in checked.files:
            raise UserError(f"{manifest_path} does not list {name}; rebuild the index")
    for name in checked.files:
        if Path(name).name != name or name in (".", "..", MANIFEST_FILE):
            raise UserError(f"{manifest_path} lists a file outside the index directory ({name!r}); rebuild the index")
    return checked


def _verify(path: Path, expected: FileEntry) -> None:
    if not path.is_file():
        raise UserError(f"{path} is missing; the index directory is incomplete: rebuild or restore it")
    size = path.stat().st_size
    if size < expected.size:
        raise UserError(f"{path} is truncated: {size:,} bytes, the manifest says {expected.size:,}")
    if size > expected.size:
        raise UserError(f"{path} has {size:,} bytes, the manifest says {expected.size:,}: it was modified")
    if file_sha256(path) != expected.sha256:
        raise UserError(f"{path} is corrupt: its sha256 does not match the manifest; rebuild or restore it")


def working_directory(target: str | Path) -> Path:
    """A new empty directory beside `target` for a build's large temporary files; a later save removes it once
    the process that made it is gone (killed), as it does the staging copies of killed saves."""
    return staging_directory(Path(target).absolute())


def _keep_modes(target: Path, staging: Path, names: list[str]) -> None:
    """Give `staging` and its files the permission bits of `target` and its files, where those exist."""
    for name in names:
        if (target / name).is_file():
            os.chmod(staging / name, stat.S_IMODE((target / name).stat().st_mode))
    if target.is_dir():
        os.chmod(staging, stat.S_IMODE(target.stat().st_mode))


def _describe(path: Path) -> dict[str, int | str]:
    """The `FileEntry` of `path`, as JSON."""
    return {"size": path.stat().st_size, "sha256": file_sha256(path)}


_WRITE_HINTS = {
    errno.ENOSPC: "free space on its file system and retry",
    errno.EDQUOT: "free space within your disk quota and retry",
    errno.EFBIG: "raise the file size limit (ulimit -f) and retry",
    errno.EROFS: "it is on a read-only file system: copy it somewhere writable and update the copy",
    errno.EACCES: "make the index directory and its parent folder writable by this user",
    errno.EPERM: "make the index directory and its parent folder writable by this user",
}


@contextmanager
def writing(directory: Path) -> Iterator[None]:
    """Turn an `OSError` while locking, reading or saving the index at `directory` into a one-line `UserError`.

    Saves are atomic, so the message can promise that the previous index is unchanged.
    """
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        hint = _WRITE_HINTS.get(exc.errno or 0, "check that the index's folder is writable and retry")
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot write index {directory}: {reason}{where}; {hint}; the index is unchanged") from exc
