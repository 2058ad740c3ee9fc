"""IVF indexes larger than memory: shards of inverted lists merged into one on-disk file (FAISS's own recipe).

Rows are added to a trained, empty IVF index in shards of a bounded number of rows; each full
shard is written to a file and the index emptied again. Every shard's lists are then merged into
`lists.ivfdata`, which FAISS memory-maps (`OnDiskInvertedLists`): a search reads only the lists
it probes, and the operating system keeps the hot ones in its page cache. The merge is
`faiss.contrib.ondisk.merge_ondisk`'s (`OnDiskInvertedLists.merge_from_multiple`), given list
objects rather than file names so that merged lists can be merged again. The index file holds
the coarse quantizer and the list offsets; it is read back with `IO_FLAG_ONDISK_SAME_DIR`, so
the lists are looked up beside it wherever the directory is moved.

FAISS cannot add to merged on-disk lists in place, so adding rows merges again: the current
lists plus a shard of the new rows into a new file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from retrieval.runtime.native_output import native_stdout_discarded

__all__ = ["LISTS_FILE", "ShardedLists", "link_or_copy", "lists_file", "merged_lists", "read_with_lists_beside"]

LISTS_FILE = "lists.ivfdata"


class ShardedLists:
    """Adds rows to a trained, empty IVF index shard by shard, then merges the shards into on-disk lists.

    Args:
        index: the trained IVF index (no vectors yet); `merge` returns a copy holding the merged on-disk lists.
        directory: where shards and lists files are written (an empty working directory).
        shard_rows: rows a shard holds in memory before it is written out.
    """

    def __init__(self, index: faiss.Index, directory: Path, shard_rows: int) -> None:
        self._index, self._directory, self._shard_rows = index, directory, shard_rows
        self._empty = faiss.clone_index(index)  # the trained quantizer, for every later merge
        self._shards: list[Path] = []
        self._merged: faiss.Index | None = None

    def add_with_ids(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add rows to the current shard, writing it out once it holds `shard_rows` rows."""
        self._index.add_with_ids(vectors, ids)
        if self._index.ntotal >= self._shard_rows:
            self._write_shard()

    def merge(self) -> faiss.Index:
        """Merge the lists merged so far and every shard written since into a new lists file; returns its index."""
        self._write_shard()
        previous = None if self._merged is None else lists_file(self._merged)
        shards = [faiss.read_index(str(path), faiss.IO_FLAG_MMAP) for path in self._shards]  # not read into memory
        sources = [faiss.extract_index_ivf(index).invlists for index in shards]
        if self._merged is not None:
            sources.insert(0, faiss.extract_index_ivf(self._merged).invlists)
        folder = self._directory / f"merge-{len(list(self._directory.glob('merge-*')))}"
        folder.mkdir()  # every lists file is named LISTS_FILE, each in its own folder
        merged = merged_lists(self._empty, sources, folder / LISTS_FILE)
        del shards, sources
        for path in self._shards:
            path.unlink()
        if previous is not None:
            previous.unlink()
        self._shards, self._merged = [], merged
        return merged

    def add_and_merge(self, vectors: np.ndarray, ids: np.ndarray) -> faiss.Index:
        """Merge the current on-disk lists and a shard of these rows into a new lists file; returns its index."""
        self._index.add_with_ids(vectors, ids)
        return self.merge()

    def _write_shard(self) -> None:
        if self._index.ntotal:
            path = self._directory / f"shard-{len(self._shards):05d}.faiss"
            faiss.write_index(self._index, str(path))
            self._shards.append(path)
            self._index.reset()


def merged_lists(empty: faiss.Index, sources: Sequence[Any], path: Path) -> faiss.Index:
    """A copy of the trained, empty IVF index `empty` whose lists are `sources`' lists (`faiss.InvertedLists`),
    merged into a file at `path`.

    FAISS's `OnDiskInvertedLists.merge_from_multiple`: list i of the result is list i of every
    source in turn, so the sources must share `empty`'s coarse quantizer. Its "resizing FILE" lines
    (printed from C++, unconditionally) are discarded.
    """
    merged = faiss.clone_index(empty)
    ivf = faiss.extract_index_ivf(merged)
    invlists = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(path))
    pointers = faiss.InvertedListsPtrVector()  # type: ignore[attr-defined]  # SWIG vector, not in FAISS's stubs
    for source in sources:
        pointers.push_back(source)
    with native_stdout_discarded():
        merged.ntotal = ivf.ntotal = invlists.merge_from_multiple(pointers.data(), pointers.size(), False)
    ivf.replace_invlists(invlists, True)
    invlists.this.disown()  # type: ignore[attr-defined]  # SWIG ownership: the index frees the lists now
    return merged


def read_with_lists_beside(path: Path) -> faiss.Index:
    """The index file at `path`, its on-disk lists memory-mapped from the `LISTS_FILE` beside it.

    `IO_FLAG_ONDISK_SAME_DIR`; the line FAISS prints from C++ when the lists were written under
    another directory (every saved index: they are written in a working directory) is discarded.
    """
    with native_stdout_discarded():
        return faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR)


def lists_file(index: faiss.Index) -> Path | None:
    """The on-disk lists file an IVF index (or the IVF index it wraps) searches; None for in-memory lists."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or ivf.invlists is None:
        return None
    invlists = faiss.downcast_InvertedLists(ivf.invlists)
    return Path(invlists.filename) if isinstance(invlists, faiss.OnDiskInvertedLists) else None


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link `source` at `target` (same file system: instant, no second copy), else copy it with plain reads."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
