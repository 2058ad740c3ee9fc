"""The add phase of a build, and chunked adds of later vectors: every row into the index with its id.

A streamed build adds in one pass, keeping the held-out queries' exact neighbours as it goes; an
on-disk build adds to lists written out in shards (`retrieval.index.on_disk`), an ivfpq build with a
working directory spills its re-ranking vectors to a file (`retrieval.index.refine_file`).
"""

from __future__ import annotations

from collections.abc import Iterator

import faiss
import numpy as np
from tqdm.auto import tqdm

from retrieval.index.build.options import IndexBuildOptions
from retrieval.index.choice import IndexPlan
from retrieval.index.on_disk import ShardedLists
from retrieval.index.refine_file import RefineSpill
from retrieval.index.streaming import ADD_CHUNK, UnitChunks, exact_neighbors_streamed

__all__ = ["Sink", "add_in_chunks", "add_stream", "sink_for"]

_SHARD_BYTES = 1 << 30  # in-memory lists of an on-disk build, written out as a shard once this full (no budget)

Sink = faiss.Index | ShardedLists | RefineSpill


def sink_for(index: faiss.Index, plan: IndexPlan, options: IndexBuildOptions) -> Sink:
    """Where a build adds its rows: on-disk lists, an ivfpq spilling its re-ranking vectors, or `index` itself."""
    if options.on_disk is not None:
        shard_rows = max(options.chunk_rows, int((options.budget or _SHARD_BYTES) // (2 * plan.bytes_per_vector)))
        return ShardedLists(index, options.on_disk, shard_rows)
    if options.refine_directory is not None and plan.kind == "ivfpq":
        return RefineSpill(index, options.refine_directory)
    return index


def add_stream(
    sink: Sink,
    reader: UnitChunks,
    held_out: np.ndarray,
    queries: np.ndarray | None,
    depth: int,
    progress: bool,
    first_id: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Add every row but the `held_out` ones (sorted positions), ids = first_id + row numbers, in one pass.

    Returns:
        `(scores, ids)`, `(Q, depth)` each: the exact top-`depth` of `queries` among the added rows,
        merged chunk by chunk as they are added; `(0, depth)` each when `queries` is None.
    """

    def added() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start, rows in reader.read("indexing", progress):
            positions = np.arange(start, start + len(rows), dtype=np.int64)
            keep = ~np.isin(positions, held_out, assume_unique=True)
            ids = positions[keep] + first_id
            sink.add_with_ids(rows[keep], ids)
            yield ids, rows[keep]

    if queries is None:
        for _ in added():
            pass
        return np.zeros((0, depth), dtype=np.float32), np.zeros((0, depth), dtype=np.int64)
    return exact_neighbors_streamed(added(), queries, depth)


def add_in_chunks(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray, progress: bool, description: str) -> None:
    """`index.add_with_ids` in chunks of `ADD_CHUNK` rows, with a progress bar."""
    bar = tqdm(total=len(vectors), desc=description, unit="vec", disable=not progress or len(vectors) < ADD_CHUNK)
    with bar:
        for start in range(0, len(vectors), ADD_CHUNK):
            stop = min(start + ADD_CHUNK, len(vectors))
            index.add_with_ids(vectors[start:stop], ids[start:stop])
            bar.update(stop - start)
