"""`SearchIndex`: a FAISS index of unit embeddings with stable ids, metadata and a verified manifest.

Ids are int64 and never reused: a vector keeps its id through `add`, `remove`, `save` and `load`,
and metadata rows are joined by id, never by position. Kinds whose FAISS index removes vectors
in place (flat, ivf) do; for the others (hnsw, ivfpq) a removed id becomes a tombstone that
search filters out, and that the manifest lists, until `compact` drops it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa

from retrieval.core.rerank import augmentation_at_build
from retrieval.errors import UserError
from retrieval.index.build.add import add_in_chunks
from retrieval.index.build.options import IndexBuildOptions
from retrieval.index.build.pipeline import BuiltIndex, build_index
from retrieval.index.choice import KINDS
from retrieval.index.evaluation import evaluate_index
from retrieval.index.filter_language import Filter
from retrieval.index.filtered_search import EXACT_MAX_PASSING, LabelSpace, search_passing
from retrieval.index.gallery import IndexGallery
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.manifest import IndexManifest, Measured
from retrieval.index.metadata import Metadata, MetadataInput
from retrieval.index.on_disk import LISTS_FILE, link_or_copy, lists_file, read_with_lists_beside
from retrieval.index.refine_file import REFINE_FILE, from_index_file, without_refine
from retrieval.index.storage import (
    INDEX_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    read_verified_manifest,
    write_index_directory,
)
from retrieval.index.stored_rows import ivf_directory, stored_rows
from retrieval.index.streaming import VectorStream, unit_rows
from retrieval.index.tie_order import ranked
from retrieval.index.tuning import TUNED_K, set_search_parameters

__all__ = ["SearchIndex"]

_LOAD_ATTEMPTS = 5  # loads of a directory that saves keep swapping under the reader, before its error stands
_MMAP_FLAGS = faiss.IO_FLAG_MMAP_IFC  # flat vector storage (flat, HNSW, RFlat); inverted lists are read


class SearchIndex:
    """Nearest-neighbour search by inner product over L2-normalized embeddings.

    Build one with `SearchIndex.build`, open a saved one with `SearchIndex.load`.

    Attributes:
        manifest: what `save` writes to `manifest.json` (`IndexManifest`: kind, factory string,
            parameters, measured recall and latency, model information, ...).
    """

    def __init__(
        self,
        index: faiss.Index,
        metadata: Metadata,
        manifest: IndexManifest,
        read_only: bool = False,
        refine_file: Path | None = None,
    ) -> None:
        """Wrap a built FAISS index; use `build` or `load` rather than calling this directly."""
        self._index = index
        self._read_only = read_only  # memory-mapped: FAISS aborts the process on a write to mapped storage
        self._refine_file = refine_file  # ivfpq's re-ranking vectors, mapped from this file (`refine_file`)
        self._metadata = metadata
        self.manifest = manifest
        self._tombstones = np.asarray(sorted(manifest.removed_ids), dtype=np.int64)
        self._directory: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # ivf id -> (list, offset)
        self._labels: LabelSpace | None = None  # id <-> FAISS label, for filtered search
        set_search_parameters(index, manifest.search_parameters)

    # -- shape ---------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Dimension D of the stored vectors."""
        return int(self._index.d)

    @property
    def ntotal(self) -> int:
        """Number of searchable (not removed) vectors."""
        return len(self._metadata)

    @property
    def kind(self) -> str:
        """`flat`, `hnsw`, `ivf` or `ivfpq` (what `auto` chose, for an auto build)."""
        return self.manifest.kind

    @property
    def factory(self) -> str:
        """The `faiss.index_factory` string the index was built from."""
        return self.manifest.factory

    def __repr__(self) -> str:
        return f"SearchIndex(kind={self.kind!r}, factory={self.factory!r}, ntotal={self.ntotal}, dim={self.dim})"

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        metadata: MetadataInput = None,
        options: IndexBuildOptions | None = None,
        *,
        tuning_queries: np.ndarray | None = None,
        **settings: Any,
    ) -> SearchIndex:
        """Build an index over `embeddings`, measure it against exact search, and tune it (`IndexBuildOptions`).

        Args:
            embeddings: `(N, D)` float embeddings; rows are L2-normalized here (a zero row is an
                error), and the manifest records whether they already were. With database-side
                augmentation, the stored vectors are their augmented versions.
            metadata: N rows of per-vector data (path, label, any extra columns) as an Arrow table
                or a dict of columns; `None` stores ids only.
            options: how to build (kind, budget, recall target, augmentation, what to record).
            tuning_queries: `(Q, D)` held-out queries to measure and tune on. When `None`, up to
                1,000 random build vectors are held out: the index is built without them,
                measured and tuned with them as queries, then they are added.
            settings: `IndexBuildOptions` fields, in place of (or changing) `options`: `kind="flat"`.

        Raises:
            UserError: bad shapes or values, a trained kind with too few vectors to train, a
                memory budget nothing fits, or a recall target no setting reaches.
        """
        chosen = _options(options, settings)
        vectors, were_unit = unit_rows(embeddings, "embeddings")
        augmentation = chosen.augmentation()
        if augmentation is not None:
            vectors = augmentation.database(vectors)
        built = build_index(
            VectorStream.of_array(vectors),
            metadata,
            chosen,
            tuning_queries=tuning_queries,
            inputs_were_normalized=were_unit,
        )
        return cls._of(built)

    @classmethod
    def build_streamed(
        cls,
        stream: VectorStream,
        metadata: MetadataInput = None,
        options: IndexBuildOptions | None = None,
        *,
        tuning_queries: np.ndarray | None = None,
        trained: faiss.Index | None = None,
        first_id: int = 0,
        **settings: Any,
    ) -> SearchIndex:
        """`build` from vectors read in chunks: memory holds the index, its samples and one chunk, never all N rows.

        Given the same rows, the result is the same as `build`'s, whatever `options.chunk_rows` is
        (the phases: `retrieval.index.build.pipeline`).

        Args:
            stream: the N rows (see `retrieval.index.streaming.VectorStream`); each chunk is
                L2-normalized as it is read.
            metadata, options, tuning_queries, settings: as for `build`; `options.on_disk` and
                `options.refine_directory` keep its large files in working directories.
            trained: a trained, empty index of the plan's factory (`retrieval.index.shards`) to add to
                instead of training one: no training sample is read and, without `tuning_queries`, nothing is
                held out or measured (a shard of a larger index, measured once merged).
            first_id: the id of the first row (a shard's offset in the full list of rows): ids run from first_id.

        Raises:
            UserError: as `build`, when the stream yields a number of rows other than `stream.count`, and for
                database-side augmentation, which needs every vector at once.
        """
        chosen = _options(options, settings)
        if chosen.database_augmentation is not None:
            raise UserError("database-side augmentation (dba) needs every vector at once: build from an array")
        built = build_index(stream, metadata, chosen, tuning_queries=tuning_queries, trained=trained, first_id=first_id)
        return cls._of(built)

    @classmethod
    def _of(cls, built: BuiltIndex) -> SearchIndex:
        """The `SearchIndex` of a build; read-only when its re-ranking vectors are mapped from a file."""
        read_only = built.refine_file is not None
        return cls(built.index, built.metadata, built.manifest, read_only=read_only, refine_file=built.refine_file)

    # -- searching -----------------------------------------------------------------------------
    def search(self, vectors: np.ndarray, k: int = 10, filter: Filter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k most similar stored vectors of each query, among those whose metadata passes `filter`.

        Args:
            vectors: `(Q, D)` or `(D,)` queries; normalized here.
            k: results per query, >= 1.
            filter: metadata conditions (`retrieval.index.filter_language`), applied inside FAISS with an
                `IDSelector` (see `retrieval.index.filtered_search`): the exact top-k of the passing vectors
                for flat, the tuned recall for the other kinds. `None` or no conditions: all vectors.

        Returns:
            `(scores, ids)`: `(Q, k)` float32 inner products, best first (equal scores by the smaller
            id, `retrieval.index.tie_order`), and `(Q, k)` int64 ids; fewer than k matches (fewer stored,
            or fewer passing the filter) are padded with id -1 and score -inf.

        Raises:
            UserError: bad queries or k; a filter naming an unknown column or comparing a column
                with a value of another type.
        """
        queries, _ = unit_rows(np.atleast_2d(vectors), "query vectors", self.dim)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"k must be a positive integer, got {k!r}")
        exact = self.kind == "flat"
        if filter is not None and filter.conditions:
            mask = filter.mask(self._metadata.table)  # once, however often `ranked` searches
            exact = exact or int(mask.sum()) <= EXACT_MAX_PASSING  # `search_passing` scans them
            scores, ids = ranked(lambda width: self._search_filtered(queries, width, mask), int(k), exact)
        else:
            scores, ids = ranked(lambda width: self._search_all(queries, width), int(k), exact)
        return scores.astype(np.float32, copy=False), ids.astype(np.int64, copy=False)

    def _search_all(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's `(scores, ids)` for `queries`, removed ids moved last as -1; at least k columns when stored."""
        # Never a shorter list than the k the index was tuned for: re-ranking and graph search
        # shortlists scale with it, and the top 1 of a k=1 search should be the top 1 of k=10.
        width = min(max(int(k), TUNED_K) + len(self._tombstones), max(int(self._index.ntotal), 1))
        scores, ids = self._index.search(queries, width)
        if len(self._tombstones):
            keep = (ids >= 0) & ~np.isin(ids, self._tombstones)
            order = np.argsort(~keep, axis=1, kind="stable")
            scores = np.take_along_axis(scores, order, axis=1)
            ids = np.take_along_axis(ids, order, axis=1)
            ids[~np.take_along_axis(keep, order, axis=1)] = -1
        return scores, ids

    def _search_filtered(self, queries: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's `(scores, ids)` among the vectors whose metadata rows `mask` keeps (removed ones have no row)."""
        passing = self._metadata.ids[mask]
        if len(passing) == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        if self._labels is None:
            self._labels = LabelSpace.of(self._index, self.manifest.next_id)
        width = min(max(k, TUNED_K), len(passing))  # the tuned shortlist length, as in `_search_all`
        return search_passing(self._labels, queries, width, passing, self.ntotal)

    def reconstruct(self, id: int) -> np.ndarray:  # noqa: A002 - the public name is the API
        """The stored `(D,)` vector of `id` (decoded, hence approximate, for ivfpq); `UserError` if unknown."""
        self._metadata.rows_of([id])
        vector = np.empty(self.dim, dtype=np.float32)
        if isinstance(self._index, faiss.IndexIVF):
            if self._directory is None:  # cached until the index changes
                self._directory = ivf_directory(self._index)
            list_numbers, offsets, ids = self._directory
            position = np.searchsorted(ids, id)
            self._index.reconstruct_from_offset(
                int(list_numbers[position]), int(offsets[position]), faiss.swig_ptr(vector)
            )
        else:
            self._index.reconstruct(int(id), vector)
        return vector

    def vectors(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """`(N, D)` stored vectors of `ids`, in order (`reconstruct` of each; `all_vectors()`: every one at once).

        Raises:
            UserError: an unknown id.
        """
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(wanted):
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.reconstruct(int(i)) for i in wanted])

    def metadata_for(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Metadata rows of `ids` as dicts (`id`, path, label, extras), in order; `UserError` on an unknown id.

        Dicts, not a record: the columns are the user's own (`Metadata.rows_for`).
        """
        return self._metadata.rows_for(ids)

    @property
    def metadata_schema(self) -> pa.Schema:
        """The metadata's Arrow schema (`id` and the other columns): what a filter may name."""
        return self._metadata.table.schema

    @property
    def metadata_table(self) -> pa.Table:
        """Every metadata row as one Arrow table (`id` and the other columns), as stored: read it, never change it."""
        return self._metadata.table

    @property
    def ids(self) -> np.ndarray:
        """`(ntotal,)` ascending ids of the searchable vectors."""
        return self._metadata.ids

    def all_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """`(ids (N,), vectors (N, D))` of every searchable vector, ids ascending (`vectors(ids)`: those of some ids).

        The vectors are the ones added, bit for bit, for every kind: ivfpq keeps them for re-ranking.
        """
        return self._stored()

    # -- updating ------------------------------------------------------------------------------
    def add(self, embeddings: np.ndarray, metadata: MetadataInput = None) -> np.ndarray:
        """Add vectors (trained kinds keep their quantizer) and their metadata; returns their new `(N,)` ids.

        Ids continue after the largest id ever assigned, so a removed id is never reused. An index built
        with database-side augmentation stores each new vector augmented with its nearest stored ones, as
        its build did (`DatabaseAugmentation.added`).
        """
        self._check_writable("add to")
        vectors, _ = unit_rows(embeddings, "embeddings", self.dim)
        if self.manifest.database_augmentation:
            augmentation = augmentation_at_build(self.manifest.database_augmentation)
            vectors = augmentation.added(IndexGallery(self), vectors)
        start = self.manifest.next_id
        ids = np.arange(start, start + len(vectors), dtype=np.int64)
        rows = Metadata.from_rows(ids, metadata)
        try:
            merged = self._metadata.appended(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(f"new metadata columns do not match the index's: {exc}") from exc
        add_in_chunks(self._index, vectors, ids, progress=False, description="adding")
        self._metadata = merged
        self._directory = self._labels = None
        self.manifest.count, self.manifest.stored, self.manifest.next_id = (
            len(merged),
            int(self._index.ntotal),
            start + len(vectors),
        )
        return ids

    def remove(self, ids: Sequence[int] | np.ndarray) -> int:
        """Remove `ids` from search results and metadata; returns how many were removed.

        Raises:
            UserError: an id is not stored (never assigned, or already removed).
        """
        self._check_writable("remove from")
        unique = np.unique(np.asarray(ids, dtype=np.int64).reshape(-1))
        remaining = self._metadata.without(unique)  # raises on unknown ids before anything changes
        if KINDS[self.kind].native_remove:
            self._index.remove_ids(faiss.IDSelectorBatch(unique))
        else:
            self._tombstones = np.union1d(self._tombstones, unique)
        self._metadata = remaining
        self._directory = self._labels = None
        self.manifest.count, self.manifest.stored = len(remaining), int(self._index.ntotal)
        self.manifest.removed_ids = self._tombstones.tolist()
        return len(unique)

    def compact(self) -> int:
        """Drop the removed vectors hnsw and ivfpq only hide, by re-adding the survivors; returns how many went.

        The trained parts (ivfpq's centroids and product quantizer) are kept and the survivors are
        encoded again with them into the same codes. An hnsw graph
        is rebuilt over the survivors with the same M and efConstruction; its tuned efSearch is kept
        (the same construction over a subset of the same vectors), and `evaluate` measures it anew.
        Ids, metadata and search parameters stay. Flat and ivf drop removed vectors at once: 0.
        """
        self._check_writable("compact")
        if len(self._tombstones) == 0:
            return 0
        ids, vectors = self._stored()
        self._index.reset()
        add_in_chunks(self._index, vectors, ids, progress=True, description="compacting")
        dropped = len(self._tombstones)
        self._tombstones = np.zeros(0, dtype=np.int64)
        self._directory = self._labels = None
        self.manifest.stored, self.manifest.removed_ids = int(self._index.ntotal), []
        return dropped

    # -- measuring -----------------------------------------------------------------------------
    def evaluate(self, queries: np.ndarray | None = None, k: int = 10) -> Measured:
        """Recall@k against exact search over the stored vectors, latency, QPS and bytes per vector.

        Args:
            queries: `(Q, D)` queries. `None` takes up to 1,000 stored vectors as queries and
                leaves each one's own id out of both result lists (leave-one-out).
            k: the k of k-recall@k.

        Returns:
            `recall_at_k`, `k`, `neighbors`, `queries`, `p50_ms`, `p99_ms` (one query, one
            thread), `batch_qps`, `batch_threads`, `resident_bytes_per_vector` (in memory once
            loaded) and `disk_bytes_per_vector` (its files; see `bytes_per_vector`), `ntotal`,
            `kind`. Recall counts each query's exact top `neighbors`, which is k unless the index
            holds fewer candidates (leave-one-out: ntotal - 1): 10 vectors give 9 neighbours a
            query, all of them found is 1.0. With no candidate at all (one vector, leave-one-out)
            there is nothing to measure: `recall_at_k` is None. Every kind keeps the full vectors
            (ivfpq for re-ranking), so the exact reference is the same as at build time.
        """
        measured = evaluate_index(self._stored(), self.search, self._index, queries, k)
        return measured.model_copy(update={"ntotal": self.ntotal, "kind": self.kind})

    # -- disk ----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write `index.faiss`, `metadata.arrow` and `manifest.json` to `directory`, atomically.

        An existing index there is replaced only once the new one is complete on disk.
        """
        lists = lists_file(self._index)
        writers: dict[str, Callable[[Path], None]] = {} if lists is None else {LISTS_FILE: partial(link_or_copy, lists)}
        if self._refine_file is not None:
            writers[REFINE_FILE] = partial(link_or_copy, self._refine_file)
        writers.update({INDEX_FILE: self._write_faiss, METADATA_FILE: self._metadata.write})
        self.manifest = write_index_directory(directory, writers, self.manifest)
        if self._refine_file is not None:  # the mapped file is now (also) this one: a build's working copy may go
            self._refine_file = Path(directory).absolute() / REFINE_FILE

    @classmethod
    @contextmanager
    def edit(cls, directory: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[SearchIndex]:
        """Load the index at `directory` under its writer lock, yield it to change, and save it.

        The lock is held from load to save, so two processes editing one index both take effect
        (neither overwrites the other's change); the second waits up to `lock_timeout` seconds.
        Nothing is saved if the body raises.

        Raises:
            UserError: another writer held the lock for `lock_timeout` seconds, or `load`'s errors.
            OSError: the directory or its folder cannot be written, or the disk is full.
        """
        with writer_lock(directory, lock_timeout):
            index = cls.load(directory)
            yield index
            index.save(directory)

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = False, dim: int | None = None) -> SearchIndex:
        """Open a saved index, after verifying every file against its manifest.

        Args:
            directory: what `save` wrote.
            mmap: memory-map the flat vector storage of the FAISS file instead of reading it
                (flat, HNSW and ivfpq's re-ranking vectors; inverted lists are still read): opens
                fast and shares pages between processes, but the index is read-only
                (`add`/`remove` raise). On-disk lists (`lists.ivfdata`) and ivfpq vectors in
                `refine.faiss` are always mapped, and such indexes are always read-only.
            dim: the embedding dimension the caller's model produces; a different index
                dimension is an error.

        Raises:
            UserError: saying what is wrong: missing directory or file, unreadable manifest,
                newer format version, truncated file, checksum mismatch, wrong dimension,
                vector count mismatch.

        A load reads several files by path; a save that swaps in a new directory meanwhile
        (`storage.write_index_directory`) could mix two versions. So the directory's identity is
        checked before and after, and a load it changed under is done again.
        """
        for _ in range(_LOAD_ATTEMPTS - 1):
            before = _identity(directory)
            try:
                loaded = cls._load_once(directory, mmap, dim)
            except UserError:
                if _identity(directory) == before:
                    raise  # nothing moved: the directory itself is wrong
                continue
            if _identity(directory) == before:
                return loaded
        return cls._load_once(directory, mmap, dim)

    @classmethod
    def _load_once(cls, directory: str | Path, mmap: bool, dim: int | None) -> SearchIndex:
        """`load`'s reads, once; files of two versions give a `UserError` (sizes, checksums or counts disagree)."""
        manifest = read_verified_manifest(directory)  # before FAISS parses a byte
        path = Path(directory) / INDEX_FILE
        expected_dim = manifest.dimension
        if dim is not None and dim != expected_dim:
            raise UserError(f"{directory} holds {expected_dim}-d vectors but the model makes {dim}-d embeddings")
        try:
            on_disk = LISTS_FILE in manifest.files  # its lists are memory-mapped from beside the index file
            index = read_with_lists_beside(path) if on_disk else faiss.read_index(str(path), _MMAP_FLAGS if mmap else 0)
            refine_file = Path(directory).absolute() / REFINE_FILE if REFINE_FILE in manifest.files else None
            if refine_file is not None:  # ivfpq's re-ranking vectors, always memory-mapped
                index = from_index_file(index, refine_file)
        except RuntimeError as exc:
            raise UserError(f"FAISS cannot read {path}: {str(exc).splitlines()[0]}") from exc
        if index.d != expected_dim:
            raise UserError(f"{path} holds {index.d}-d vectors, the manifest says {expected_dim}: wrong dimension")
        if index.ntotal != manifest.stored_count:
            raise UserError(
                f"{path} holds {index.ntotal} vectors, the manifest says {manifest.stored_count}: count mismatch"
            )
        metadata = Metadata.read(Path(directory) / METADATA_FILE)
        if len(metadata) != manifest.count:
            raise UserError(
                f"{Path(directory) / METADATA_FILE} has {len(metadata)} rows, the manifest says "
                f"{manifest.count} vectors: count mismatch"
            )
        ids = metadata.ids  # ascending
        if len(ids) and ids[-1] >= manifest.next_id:  # `index add` would hand out an id a stored item holds
            raise UserError(
                f"{Path(directory) / MANIFEST_FILE}: next_id {manifest.next_id} is not above the largest stored id "
                f"{ids[-1]}; restore the manifest or rebuild the index"
            )
        read_only = mmap or on_disk or refine_file is not None
        return cls(index, metadata, manifest, read_only=read_only, refine_file=refine_file)

    # -- internals ---------------------------------------------------------------------------
    def _write_faiss(self, path: Path) -> None:
        """Write the FAISS index through Python's file object, so a failed write raises `OSError`.

        `faiss.write_index(index, path)` reports a failed final flush (a full disk) on stderr
        only and returns, leaving a truncated file; a failed write mid-way is a `RuntimeError`.
        """
        split = without_refine(self._index)  # re-ranking vectors in refine.faiss: index.faiss holds the rest
        with open(path, "wb") as handle:
            writer = faiss.PyCallbackIOWriter(handle.write)  # type: ignore[attr-defined]  # not in FAISS's stubs
            faiss.write_index(self._index if split is None else split[0], writer)

    def _check_writable(self, action: str) -> None:
        """Refuse a change to a read-only index, with the way to a writable one that fits why it is read-only."""
        if not self._read_only:
            return
        files = self.manifest.files
        if LISTS_FILE in files or REFINE_FILE in files:
            what = f"on-disk lists ({LISTS_FILE}" if LISTS_FILE in files else f"re-ranking vectors ({REFINE_FILE}"
            raise UserError(
                f"cannot {action} a read-only index: its {what}, memory-mapped by --on-disk, index merge or "
                "ivfpq) cannot be changed by FAISS; build the index again with what it should hold: "
                "retrieval index build --embeddings PATH... --out NEW_DIR"
            )
        raise UserError(
            f"cannot {action} a read-only index, loaded with SearchIndex.load(..., mmap=True) (how index query and "
            "serve read it); load it with mmap=False (the default) to change it"
        )

    def _stored(self) -> tuple[np.ndarray, np.ndarray]:
        """`(ids (N,), vectors (N, D))` of the searchable vectors, ids ascending."""
        ids, vectors = stored_rows(self._index)
        live = ~np.isin(ids, self._tombstones)
        order = np.argsort(ids[live])
        return ids[live][order], vectors[live][order]


def _identity(directory: str | Path) -> tuple[int, int] | None:
    """The directory's (device, inode), which every save changes (it swaps a new directory in); None if missing."""
    try:
        status = os.stat(directory)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _options(options: IndexBuildOptions | None, settings: dict[str, Any]) -> IndexBuildOptions:
    """`options` (default: the defaults) with the fields named in `settings` replaced.

    `settings` are keyword arguments passed through to `dataclasses.replace`, which checks their names.
    """
    return dataclasses.replace(options or IndexBuildOptions(), **settings)
