"""Test images that are copies of training images: the leak `retrieval evaluate` warns about, and `--exclude-leaks`.

Every evaluation of a dataset of image files compares the test files' sha256 with the train and
val files' (reading them, no model): identical files are a leak it warns about in one line. A
near-copy (re-encoded, resized, cropped, recoloured) needs a closer look: `--exclude-leaks` runs
`retrieval audit`'s copy check on the image files (`audit.leaks.copy_leaks`, no model) and scores
Recall@K and MAP@R without the test images it flags (neither as queries nor in the gallery), so the
two commands leave out the same images. An embedding cosine cannot do this on category data: most
pairs of a class pass any threshold that catches the copies (docs/audit.md).

The sha256 of every file is kept in a small cache, so a second evaluation of the same data reads
no image: `$XDG_CACHE_HOME/retrieval/file-hashes/` (`~/.cache/...` without it), one JSON file per
folder holding a dataset's files, each entry keyed by the file's resolved path, size and mtime_ns.
A file whose size or mtime changed is read again; one modified within the last 2 s is not cached,
since a later change within the same filesystem timestamp could go unseen. `RETRIEVAL_HASH_CACHE=0`
turns the cache off; a cache that cannot be read is rebuilt, one that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat as stat_module
import time
from pathlib import Path

import numpy as np

from retrieval.audit.leaks import SPLIT_ORDER, copy_leaks
from retrieval.config import DataConfig
from retrieval.data import EvalSplit, dataset_spec, read_splits
from retrieval.runtime.files import file_sha256, write_text

__all__ = ["HASH_CACHE_ENV", "copied_test_rows", "identical_test_rows", "without_rows", "warning_line"]

HASH_CACHE_ENV = "RETRIEVAL_HASH_CACHE"  # "0" turns the file hash cache off
_CACHE_FORMAT = 1
_SETTLED_NS = 2_000_000_000  # a file modified this recently may change again within its mtime's resolution


def identical_test_rows(config: DataConfig) -> np.ndarray | None:
    """`(N_test,)` bool: test files byte-identical to a train or val file; None for data without files (digits)."""
    if dataset_spec(config.name).read_files is None:
        return None
    splits = read_splits(config)
    earlier_paths = [path for name in ("train", "val") if name in splits for path in splits[name].paths]
    test_paths = splits["test"].paths
    digests = _digests([*earlier_paths, *test_paths])
    earlier = set(digests[: len(earlier_paths)])
    return np.array([digest in earlier for digest in digests[len(earlier_paths) :]], dtype=bool)


def copied_test_rows(config: DataConfig, max_ratio: float) -> np.ndarray | None:
    """`(N_test,)` bool: test images that copy a train or val image by the audit's copy check; None without files."""
    if dataset_spec(config.name).read_files is None:
        return None
    splits = read_splits(config)
    names = [name for name in SPLIT_ORDER if name in splits]
    paths = [path for name in names for path in splits[name].paths]
    of_split = [name for name in names for _ in splits[name].paths]
    leaked = copy_leaks(paths, of_split, max_ratio=max_ratio).leaked
    return leaked[len(paths) - len(splits["test"].paths) :]


def without_rows(split: EvalSplit, rows: np.ndarray) -> EvalSplit:
    """`split` scored without the `(N,)` bool `rows`: they are neither queries nor gallery items."""
    keep = ~rows
    query = keep if split.query_mask is None else split.query_mask & keep
    gallery = keep if split.gallery_mask is None else split.gallery_mask & keep
    return dataclasses.replace(split, query_mask=query, gallery_mask=gallery)


def warning_line(leaked: np.ndarray, what: str, excluded: bool) -> str:
    """`warning: 12 of 1000 test images (1.20%) are identical files to train/val images; ...` (one line)."""
    share = leaked.mean() if len(leaked) else 0.0
    if excluded:
        then = "the metrics below leave them out (--exclude-leaks)"
    else:
        then = "they inflate the metrics below; --exclude-leaks leaves them and near-copies out (audit lists them)"
    count = f"{int(leaked.sum())} of {len(leaked)} test images ({share:.2%})"
    return f"warning: {count} are {what} train/val images; {then}"


def _digests(paths: list[Path]) -> list[str]:
    """Each file's sha256, from the cache where its size and mtime are unchanged; an unreadable file gets a
    placeholder naming it, which matches only the same file."""
    cache_file = _cache_file(paths)
    cached = _read_cache(cache_file) if cache_file is not None else {}
    settled_before = time.time_ns() - _SETTLED_NS
    folders: dict[str, str] = {}  # each folder resolved once: a dataset has thousands of files in a few
    digests, entries = [], {}
    for number, path in enumerate(paths):
        try:
            key = _resolved(str(path), folders)
            stat = os.stat(key)
            entry = cached.get(key)
            if entry is None or entry[:2] != [stat.st_size, stat.st_mtime_ns]:
                entry = [stat.st_size, stat.st_mtime_ns, file_sha256(key)]
            digests.append(entry[2])
            if stat.st_mtime_ns < settled_before:
                entries[key] = entry
        except OSError:
            digests.append(f"unreadable {number} {path}")
    if cache_file is not None and entries != cached:
        _write_cache(cache_file, entries)
    return digests


def _resolved(path: str, folders: dict[str, str]) -> str:
    """`path` with every symbolic link resolved, its folder's looked up in (and added to) `folders`."""
    if stat_module.S_ISLNK(os.lstat(path).st_mode):
        return os.path.realpath(path)
    folder, name = os.path.split(os.path.abspath(path))
    if folder not in folders:
        folders[folder] = os.path.realpath(folder)
    return os.path.join(folders[folder], name)


def _cache_file(paths: list[Path]) -> Path | None:
    """The cache of the files under the folder that holds `paths`; None when the cache is off or nothing is hashed."""
    if os.environ.get(HASH_CACHE_ENV) == "0" or not paths:
        return None
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home folder to hold it
        return None
    folder = os.path.commonpath([os.path.dirname(os.path.abspath(path)) for path in paths])
    return base / "retrieval" / "file-hashes" / f"{hashlib.sha256(folder.encode()).hexdigest()[:32]}.json"


def _read_cache(cache_file: Path) -> dict[str, list]:
    """`{resolved path: [size, mtime_ns, sha256]}`; empty when missing, unreadable or of another format."""
    try:
        content = json.loads(cache_file.read_text(encoding="utf-8"))
        files = content["files"] if content.get("format") == _CACHE_FORMAT else {}
        return {path: entry for path, entry in files.items() if _is_entry(entry)}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}


def _is_entry(entry: object) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 3
        and all(isinstance(value, int) for value in entry[:2])
        and isinstance(entry[2], str)
    )


def _write_cache(cache_file: Path, entries: dict[str, list]) -> None:
    """Replace the cache by this run's entries (files no longer listed drop out); skipped where it cannot be written."""
    with contextlib.suppress(OSError):
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_text(cache_file, json.dumps({"format": _CACHE_FORMAT, "files": entries}))
