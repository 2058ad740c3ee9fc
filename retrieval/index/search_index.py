"""`SearchIndex`: a FAISS index of unit embeddings with stable ids, metadata and a verified manifest.

Ids are int64 and never reused: a vector keeps its id through `add`, `remove`, `save` and `load`,
and metadata rows are joined by id, never by position. Kinds whose FAISS index removes vectors
in place (flat, ivf) do; for the others (hnsw, ivfpq) a removed id becomes a tombstone that
search filters out, and that the manifest lists, until `compact` drops it.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from retrieval import __version__
from retrieval.errors import UserError
from retrieval.index.choice import DEFAULT_TARGET_RECALL, IndexKind, IndexPlan, choose_index, parse_memory, plan_index
from retrieval.index.filter_language import Filter
from retrieval.index.filtered_search import LabelSpace, search_passing
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.metadata import Metadata, MetadataInput
from retrieval.index.on_disk import LISTS_FILE, ShardedLists, link_or_copy, lists_file, read_with_lists_beside
from retrieval.index.refine_file import REFINE_FILE, RefineSpill, from_index_file, refine_file_bytes, without_refine
from retrieval.index.storage import (
    FORMAT,
    FORMAT_VERSION,
    INDEX_FILE,
    METADATA_FILE,
    read_verified_manifest,
    write_index_directory,
)
from retrieval.index.streaming import VectorStream, exact_neighbors_streamed, gather_rows
from retrieval.index.tuning import (
    Measurement,
    apply_search_parameters,
    exact_neighbors,
    find_index,
    measure,
    tune_search_parameters,
)

__all__ = ["SearchIndex"]

_ADD_CHUNK = 65536  # vectors per `add` call: a progress bar that moves, bounded temporaries
_LOAD_ATTEMPTS = 5  # loads of a directory that saves keep swapping under the reader, before its error stands
_TUNING_QUERIES = 1000  # held-out queries sampled from the build set when none are given
_TRAINING_CAP = 262144  # k-means on more vectors than this barely moves the centroids
_NATIVE_REMOVE = (IndexKind.FLAT, IndexKind.IVF)
_SHARD_BYTES = 1 << 30  # in-memory lists of an on-disk build, written out as a shard once this full (no budget)
_SEED = 0
_TUNED_K = 10  # search parameters are tuned and measured for 10-recall@10
_MMAP_FLAGS = faiss.IO_FLAG_MMAP_IFC  # flat vector storage (flat, HNSW, RFlat); inverted lists are read


class SearchIndex:
    """Nearest-neighbour search by inner product over L2-normalized embeddings.

    Build one with `SearchIndex.build`, open a saved one with `SearchIndex.load`.

    Attributes:
        manifest: what `save` writes to `manifest.json` (kind, factory string, parameters,
            measured recall and latency, model information, ...).
    """

    def __init__(
        self,
        index: faiss.Index,
        metadata: Metadata,
        manifest: dict[str, Any],
        read_only: bool = False,
        refine_file: Path | None = None,
    ) -> None:
        """Wrap a built FAISS index; use `build` or `load` rather than calling this directly."""
        self._index = index
        self._read_only = read_only  # memory-mapped: FAISS aborts the process on a write to mapped storage
        self._refine_file = refine_file  # ivfpq's re-ranking vectors, mapped from this file (`refine_file`)
        self._metadata = metadata
        self.manifest = manifest
        self._tombstones = np.asarray(sorted(manifest.get("removed_ids", [])), dtype=np.int64)
        self._directory: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # ivf id -> (list, offset)
        self._labels: LabelSpace | None = None  # id <-> FAISS label, for filtered search
        _set_search_parameters(index, manifest.get("search_parameters", {}))

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
        return str(self.manifest["kind"])

    @property
    def factory(self) -> str:
        """The `faiss.index_factory` string the index was built from."""
        return str(self.manifest["factory"])

    def __repr__(self) -> str:
        return f"SearchIndex(kind={self.kind!r}, factory={self.factory!r}, ntotal={self.ntotal}, dim={self.dim})"

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        metadata: MetadataInput = None,
        *,
        kind: str = "auto",
        max_memory: int | str | None = None,
        target_recall: float | None = None,
        default_target_recall: float | None = DEFAULT_TARGET_RECALL,
        tuning_queries: np.ndarray | None = None,
        model_info: dict[str, Any] | None = None,
        match_threshold: dict[str, Any] | None = None,
        progress: bool = True,
        nlist: int | None = None,
        hnsw_m: int | None = None,
        pq_bytes: int | None = None,
    ) -> SearchIndex:
        """Build an index over `embeddings`, measure it against exact search, and tune it if asked.

        Args:
            embeddings: `(N, D)` float embeddings; rows are L2-normalized here (a zero row is an
                error), and the manifest records whether they already were.
            metadata: N rows of per-vector data (path, label, any extra columns) as an Arrow table
                or a dict of columns; `None` stores ids only.
            kind: `auto`, `flat`, `hnsw`, `ivf` or `ivfpq` (see `retrieval.index.choice`).
            max_memory: budget in bytes (or `"4G"`) that `auto` must fit.
            target_recall: tune search parameters to the cheapest ones reaching this 10-recall@10 on
                the held-out queries while 99.9% of (a sample of) stored vectors find themselves first;
                a target no setting reaches is an error.
            default_target_recall: without `target_recall`, approximate kinds (hnsw, ivf, ivfpq) are tuned
                to this target, best effort: the most accurate setting explored when none reaches it (their
                fixed defaults, e.g. ivf's nprobe 16, can return half of the true neighbours). None keeps
                the fixed defaults. The manifest records the target and whether it was given or the default.
            tuning_queries: `(Q, D)` held-out queries to measure and tune on. When `None`, up to
                1,000 random build vectors are held out: the index is built without them,
                measured and tuned with them as queries, then they are added.
            model_info: recorded under `manifest["model"]` (model_config, checkpoint_sha256, transform).
            match_threshold: the model's stored match threshold (`Checkpoint.match_threshold`), recorded as
                `manifest["match_threshold"]` for `--min-score stored` (`retrieval.index.threshold`).
            progress: show progress bars.
            nlist: inverted lists (ivf, ivfpq); default about 4·sqrt(N).
            hnsw_m: HNSW links per node; default 32.
            pq_bytes: ivfpq re-ranking code bytes; default 32 (48 bytes a vector with ids and the fast-scan code).

        Raises:
            UserError: bad shapes or values, a trained kind with too few vectors to train, a
                memory budget nothing fits, or a recall target no setting reaches.
        """
        vectors, were_unit = _unit_rows(embeddings, "embeddings")
        return cls.build_streamed(
            VectorStream.of_array(vectors),
            metadata,
            kind=kind,
            max_memory=max_memory,
            target_recall=target_recall,
            default_target_recall=default_target_recall,
            tuning_queries=tuning_queries,
            model_info=model_info,
            match_threshold=match_threshold,
            progress=progress,
            nlist=nlist,
            hnsw_m=hnsw_m,
            pq_bytes=pq_bytes,
            inputs_were_normalized=were_unit,
        )

    @classmethod
    def build_streamed(
        cls,
        stream: VectorStream,
        metadata: MetadataInput = None,
        *,
        kind: str = "auto",
        max_memory: int | str | None = None,
        target_recall: float | None = None,
        default_target_recall: float | None = DEFAULT_TARGET_RECALL,
        tuning_queries: np.ndarray | None = None,
        model_info: dict[str, Any] | None = None,
        match_threshold: dict[str, Any] | None = None,
        progress: bool = True,
        nlist: int | None = None,
        hnsw_m: int | None = None,
        pq_bytes: int | None = None,
        chunk_rows: int = _ADD_CHUNK,
        sources: list[dict[str, Any]] | None = None,
        inputs_were_normalized: bool | None = None,
        on_disk: Path | None = None,
        refine_directory: Path | None = None,
        trained: faiss.Index | None = None,
        first_id: int = 0,
    ) -> SearchIndex:
        """`build` from vectors read in chunks: memory holds the index, its samples and one chunk, never all N rows.

        Two passes over `stream`: the first gathers the sampled rows (the k-means/PQ training
        sample FAISS trains on, the held-out queries, the stored vectors tuning checks), the
        second adds every row in chunks and keeps, chunk by chunk, the held-out queries' exact
        neighbours. Rows are numbered 0..N-1 in stream order; those numbers are the ids. Given
        the same rows, the result is the same as `build`'s, whatever `chunk_rows` is.

        Args:
            stream: the N rows (see `retrieval.index.streaming.VectorStream`); each chunk is
                L2-normalized as it is read.
            metadata, kind, max_memory, target_recall, default_target_recall, tuning_queries, model_info,
                match_threshold, progress, nlist, hnsw_m, pq_bytes: as for `build`.
            chunk_rows: rows read, normalized and added at a time.
            sources: the files the rows came from (name, rows, sha256), recorded as `manifest["sources"]`.
            inputs_were_normalized: recorded in the manifest; `None` records whether every chunk was.
            on_disk: an empty working directory: build an IVF-Flat index whose inverted lists are
                written there in shards of at most half of `max_memory` (default 1 GiB) and merged
                into one memory-mapped file (`retrieval.index.on_disk`), for more vectors than fit
                in memory. `save` links that file into the index directory; the index is read-only.
            refine_directory: a working directory for an ivfpq build's float32 re-ranking vectors: written
                there (`refine.faiss`) as they stream and searched memory-mapped, so that memory holds the
                PQ codes and ids only (`retrieval.index.refine_file`). `save` links the file into the index
                directory; the index is read-only. Other kinds ignore it.
            trained: a trained, empty index of the plan's factory (`retrieval.index.shards`) to add to
                instead of training one: no training sample is read and, without `tuning_queries`, nothing is
                held out or measured (a shard of a larger index, measured once merged).
            first_id: the id of the first row (a shard's offset in the full list of rows): ids run from first_id.

        Raises:
            UserError: as `build`, and when the stream yields a number of rows other than `stream.count`.
        """
        n, dim = stream.count, stream.dim
        budget = parse_memory(max_memory)
        plan = _plan(n, dim, kind, budget, nlist=nlist, hnsw_m=hnsw_m, pq_bytes=pq_bytes, on_disk=on_disk is not None)
        if n < plan.min_training_vectors and trained is None:
            raise UserError(_too_few_message(plan, n))
        ids = np.arange(n, dtype=np.int64)  # row positions; the ids are first_id + positions
        table = Metadata.from_rows(ids + first_id, metadata)
        rng = np.random.default_rng(_SEED)
        held_out = np.zeros(0, dtype=np.int64)
        if tuning_queries is None and trained is None:
            held_out = np.sort(rng.choice(n, size=min(_TUNING_QUERIES, n // 10), replace=False))
        training = np.zeros(0, dtype=np.int64)
        if plan.trained and trained is None:
            training = np.sort(rng.choice(n, size=min(n, max(plan.min_training_vectors, _TRAINING_CAP)), replace=False))
        inserted_count = n - len(held_out)
        measuring = tuning_queries is not None or len(held_out) > 0
        target, target_source = _tuning_target(plan, target_recall, default_target_recall)
        checked = np.zeros(0, dtype=np.int64)
        if measuring and target is not None:
            inserted = np.setdiff1d(ids, held_out, assume_unique=True)
            checked = rng.choice(inserted, size=min(_TUNING_QUERIES, inserted_count), replace=False)

        reader = _UnitChunks(stream, chunk_rows)
        wanted = np.concatenate([held_out, training, checked])
        sampled = reader.read("sampling", progress) if len(wanted) else iter(())  # a shard samples nothing
        gathered = gather_rows(sampled, wanted, dim)
        held_vectors, training_vectors, checked_vectors = np.split(
            gathered, [len(held_out), len(held_out) + len(training)]
        )
        queries = held_vectors if tuning_queries is None else _unit_rows(tuning_queries, "tuning_queries", dim)[0]

        if trained is None:
            index = faiss.index_factory(dim, plan.factory, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.clone_index(trained)
        graph = find_index(index, faiss.IndexHNSW)
        if graph is not None and "ef_construction" in plan.parameters:
            graph.hnsw.efConstruction = plan.parameters["ef_construction"]
        if plan.trained and trained is None:
            index.train(training_vectors)
        del gathered, training_vectors
        depth = min(_TUNED_K, inserted_count)  # below _TUNED_K when fewer vectors are stored
        shards = spill = None
        if on_disk is not None:
            shard_rows = max(chunk_rows, int((budget or _SHARD_BYTES) // (2 * plan.bytes_per_vector)))
            shards = ShardedLists(index, on_disk, shard_rows)
        elif refine_directory is not None and plan.kind is IndexKind.IVFPQ:
            spill = RefineSpill(index, refine_directory)
        adding = shards or spill or index
        true_ids = _add_stream(adding, reader, held_out, queries if measuring else None, depth, progress, first_id)
        if shards is not None:
            index = shards.merge()
        elif spill is not None:
            index = spill.finish()
        searchable, to_label = _label_space(index)

        parameters, measured = dict(plan.search_parameters), None
        if measuring:
            if target is not None:
                stored = (checked_vectors, to_label(checked + first_id))
                parameters, _ = tune_search_parameters(
                    searchable, queries, to_label(true_ids), target, depth, stored, best_effort=target_recall is None
                )
            _set_search_parameters(index, parameters)
            measured = measure(lambda q, k: index.search(q, k), queries, true_ids, _TUNED_K)
        held_ids = held_out + first_id
        if shards is None and spill is None:
            _add(index, held_vectors, held_ids, progress, "adding held-out queries")
        elif shards is not None and len(held_out):
            index = shards.add_and_merge(held_vectors, held_ids)
        elif spill is not None and len(held_out):
            del index, searchable  # unmapped before refine.faiss is mapped again: one mapping's pages resident
            index = spill.add_and_finish(held_vectors, held_ids)

        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "toolkit_version": __version__,
            "faiss_version": faiss.__version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "kind": plan.kind.value,
            "requested_kind": IndexKind.parse(kind).value,
            "factory": plan.factory,
            "parameters": plan.parameters,
            "max_memory": budget,
            "dimension": dim,
            "metric": "inner_product",
            "normalized": True,
            "inputs_were_normalized": reader.were_unit if inputs_were_normalized is None else inputs_were_normalized,
            "count": n,
            "stored": int(index.ntotal),
            "next_id": first_id + n,
            **({"first_id": first_id} if first_id else {}),
            "removed_ids": [],
            "search_parameters": parameters,
            "target_recall": target,
            "target_recall_source": target_source,
            "measured": _measured(measured, index, held_out, tuning_queries),
            "model": dict(model_info or {}),
            "match_threshold": match_threshold,
            **({"sources": sources} if sources is not None else {}),
        }
        return cls(
            index, table, manifest, read_only=spill is not None, refine_file=None if spill is None else spill.path
        )

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
            `(scores, ids)`: `(Q, k)` float32 inner products, best first, and `(Q, k)` int64 ids;
            fewer than k matches (fewer stored, or fewer passing the filter) are padded with id -1
            and score -inf.

        Raises:
            UserError: bad queries or k; a filter naming an unknown column or comparing a column
                with a value of another type.
        """
        queries, _ = _unit_rows(np.atleast_2d(vectors), "query vectors", self.dim)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"k must be a positive integer, got {k!r}")
        if filter is not None and filter.conditions:
            scores, ids = self._search_filtered(queries, int(k), filter)
        else:
            scores, ids = self._search_all(queries, int(k))
        scores, ids = _padded(scores[:, :k], ids[:, :k], k)
        scores[ids < 0] = -np.inf
        return scores.astype(np.float32, copy=False), ids.astype(np.int64, copy=False)

    def _search_all(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's `(scores, ids)` for `queries`, removed ids moved last as -1; at least k columns when stored."""
        # Never a shorter list than the k the index was tuned for: re-ranking and graph search
        # shortlists scale with it, and the top 1 of a k=1 search should be the top 1 of k=10.
        width = min(max(int(k), _TUNED_K) + len(self._tombstones), max(int(self._index.ntotal), 1))
        scores, ids = self._index.search(queries, width)
        if len(self._tombstones):
            keep = (ids >= 0) & ~np.isin(ids, self._tombstones)
            order = np.argsort(~keep, axis=1, kind="stable")
            scores = np.take_along_axis(scores, order, axis=1)
            ids = np.take_along_axis(ids, order, axis=1)
            ids[~np.take_along_axis(keep, order, axis=1)] = -1
        return scores, ids

    def _search_filtered(self, queries: np.ndarray, k: int, filter: Filter) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's `(scores, ids)` among the vectors whose metadata passes `filter` (removed ones have no row)."""
        passing = self._metadata.ids[filter.mask(self._metadata.table)]
        if len(passing) == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        if self._labels is None:
            self._labels = LabelSpace.of(self._index, int(self.manifest["next_id"]))
        width = min(max(k, _TUNED_K), len(passing))  # the tuned shortlist length, as in `_search_all`
        return search_passing(self._labels, queries, width, passing, self.ntotal)

    def reconstruct(self, id: int) -> np.ndarray:  # noqa: A002 - the public name is the API
        """The stored `(D,)` vector of `id` (decoded, hence approximate, for ivfpq); `UserError` if unknown."""
        self._metadata.rows_of([id])
        vector = np.empty(self.dim, dtype=np.float32)
        if isinstance(self._index, faiss.IndexIVF):
            list_numbers, offsets, ids = self._ivf_directory()
            position = np.searchsorted(ids, id)
            self._index.reconstruct_from_offset(
                int(list_numbers[position]), int(offsets[position]), faiss.swig_ptr(vector)
            )
        else:
            self._index.reconstruct(int(id), vector)
        return vector

    def vectors(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """`(N, D)` stored vectors of `ids`, in order (`reconstruct` of each); `UserError` on an unknown id."""
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(wanted):
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.reconstruct(int(i)) for i in wanted])

    def metadata_for(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Metadata rows of `ids` as dicts (`id`, path, label, extras), in order; `UserError` on an unknown id."""
        return self._metadata.rows_for(ids)

    @property
    def metadata_schema(self) -> pa.Schema:
        """The metadata's Arrow schema (`id` and the other columns): what a filter may name."""
        return self._metadata.table.schema

    @property
    def ids(self) -> np.ndarray:
        """`(ntotal,)` ascending ids of the searchable vectors."""
        return self._metadata.ids

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """`(ids (N,), vectors (N, D))` of the searchable vectors, ids ascending.

        The vectors are the ones added, bit for bit, for every kind: ivfpq keeps them for re-ranking.
        """
        return self._stored()

    # -- updating ------------------------------------------------------------------------------
    def add(self, embeddings: np.ndarray, metadata: MetadataInput = None) -> np.ndarray:
        """Add vectors (trained kinds keep their quantizer) and their metadata; returns their new `(N,)` ids.

        Ids continue after the largest id ever assigned, so a removed id is never reused.
        """
        self._check_writable("add to")
        vectors, _ = _unit_rows(embeddings, "embeddings", self.dim)
        start = int(self.manifest["next_id"])
        ids = np.arange(start, start + len(vectors), dtype=np.int64)
        rows = Metadata.from_rows(ids, metadata)
        try:
            merged = self._metadata.appended(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(f"new metadata columns do not match the index's: {exc}") from exc
        _add(self._index, vectors, ids, progress=False, description="adding")
        self._metadata = merged
        self._directory = self._labels = None
        self.manifest.update(count=len(merged), stored=int(self._index.ntotal), next_id=start + len(vectors))
        return ids

    def remove(self, ids: Sequence[int] | np.ndarray) -> int:
        """Remove `ids` from search results and metadata; returns how many were removed.

        Raises:
            UserError: an id is not stored (never assigned, or already removed).
        """
        self._check_writable("remove from")
        unique = np.unique(np.asarray(ids, dtype=np.int64).reshape(-1))
        remaining = self._metadata.without(unique)  # raises on unknown ids before anything changes
        if IndexKind(self.kind) in _NATIVE_REMOVE:
            self._index.remove_ids(faiss.IDSelectorBatch(unique))
        else:
            self._tombstones = np.union1d(self._tombstones, unique)
        self._metadata = remaining
        self._directory = self._labels = None
        self.manifest.update(
            count=len(remaining), stored=int(self._index.ntotal), removed_ids=self._tombstones.tolist()
        )
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
        _add(self._index, vectors, ids, progress=True, description="compacting")
        dropped = len(self._tombstones)
        self._tombstones = np.zeros(0, dtype=np.int64)
        self._directory = self._labels = None
        self.manifest.update(stored=int(self._index.ntotal), removed_ids=[])
        return dropped

    # -- measuring -----------------------------------------------------------------------------
    def evaluate(self, queries: np.ndarray | None = None, k: int = 10) -> dict[str, Any]:
        """Recall@k against exact search over the stored vectors, latency, QPS and bytes per vector.

        Args:
            queries: `(Q, D)` queries. `None` takes up to 1,000 stored vectors as queries and
                leaves each one's own id out of both result lists (leave-one-out).
            k: the k of k-recall@k.

        Returns:
            `recall_at_k`, `k`, `neighbors`, `queries`, `p50_ms`, `p99_ms` (one query, one
            thread), `batch_qps`, `batch_threads`, `resident_bytes_per_vector` (in memory once
            loaded) and `disk_bytes_per_vector` (its files; see `_bytes_per_vector`), `ntotal`,
            `kind`. Recall counts each query's exact top `neighbors`, which is k unless the index
            holds fewer candidates (leave-one-out: ntotal - 1): 10 vectors give 9 neighbours a
            query, all of them found is 1.0. With no candidate at all (one vector, leave-one-out)
            there is nothing to measure: `recall_at_k` is None. Every kind keeps the full vectors
            (ivfpq for re-ranking), so the exact reference is the same as at build time.
        """
        ids, vectors = self._stored()
        if len(ids) == 0:
            raise UserError("the index is empty; add vectors before evaluating it")
        if queries is None:
            rng = np.random.default_rng(_SEED)
            chosen = np.sort(rng.choice(len(ids), size=min(_TUNING_QUERIES, len(ids)), replace=False))
            query_vectors, own = vectors[chosen], ids[chosen]
            truth = ids[exact_neighbors(vectors, query_vectors, k + 1)]
            true_ids = _without_own(truth, own, k)

            def search(q: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
                scores, found = self.search(q, width + 1)
                return scores, (_without_own(found, own, width) if len(q) == len(own) else found)

            measured = measure(search, query_vectors, true_ids, k)
        else:
            query_vectors, _ = _unit_rows(queries, "queries", self.dim)
            true_ids = ids[exact_neighbors(vectors, query_vectors, k)]
            measured = measure(self.search, query_vectors, true_ids, k)
        return {
            **measured.as_dict(),
            **_bytes_per_vector(self._index),
            "ntotal": self.ntotal,
            "kind": self.kind,
        }

    # -- disk ----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write `index.faiss`, `metadata.arrow` and `manifest.json` to `directory`, atomically.

        An existing index there is replaced only once the new one is complete on disk.
        """
        manifest = dict(self.manifest)
        lists = lists_file(self._index)
        writers: dict[str, Callable[[Path], None]] = {} if lists is None else {LISTS_FILE: partial(link_or_copy, lists)}
        if self._refine_file is not None:
            writers[REFINE_FILE] = partial(link_or_copy, self._refine_file)
        writers.update({INDEX_FILE: self._write_faiss, METADATA_FILE: self._metadata.write})
        self.manifest = write_index_directory(directory, writers, manifest)
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
        expected_dim = manifest["dimension"]
        if dim is not None and dim != expected_dim:
            raise UserError(f"{directory} holds {expected_dim}-d vectors but the model makes {dim}-d embeddings")
        try:
            on_disk = LISTS_FILE in manifest["files"]  # its lists are memory-mapped from beside the index file
            index = read_with_lists_beside(path) if on_disk else faiss.read_index(str(path), _MMAP_FLAGS if mmap else 0)
            refine_file = Path(directory).absolute() / REFINE_FILE if REFINE_FILE in manifest["files"] else None
            if refine_file is not None:  # ivfpq's re-ranking vectors, always memory-mapped
                index = from_index_file(index, refine_file)
        except RuntimeError as exc:
            raise UserError(f"FAISS cannot read {path}: {str(exc).splitlines()[0]}") from exc
        if index.d != expected_dim:
            raise UserError(f"{path} holds {index.d}-d vectors, the manifest says {expected_dim}: wrong dimension")
        stored = manifest.get("stored", manifest["count"])
        if index.ntotal != stored:
            raise UserError(f"{path} holds {index.ntotal} vectors, the manifest says {stored}: count mismatch")
        metadata = Metadata.read(Path(directory) / METADATA_FILE)
        if len(metadata) != manifest["count"]:
            raise UserError(
                f"{Path(directory) / METADATA_FILE} has {len(metadata)} rows, the manifest says "
                f"{manifest['count']} vectors: count mismatch"
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
        if self._read_only:
            raise UserError(
                f"cannot {action} a read-only index (loaded with mmap=True, or with on-disk lists or ivfpq "
                "re-ranking vectors in refine.faiss); load it without mmap, or rebuild it from the embedding files"
            )

    def _stored(self) -> tuple[np.ndarray, np.ndarray]:
        """`(ids (N,), vectors (N, D))` of the searchable vectors, ids ascending."""
        if isinstance(self._index, faiss.IndexIDMap2):
            inner = faiss.downcast_index(self._index.index)
            ids = faiss.vector_to_array(self._index.id_map)
            # An explicit numpy buffer: with faiss.contrib.torch_utils imported (pytorch-metric-learning's
            # accuracy calculator does), reconstruct_n without one returns a torch tensor.
            vectors = inner.reconstruct_n(0, inner.ntotal, np.empty((inner.ntotal, self.dim), dtype=np.float32))
        else:  # IVF-Flat: the inverted lists hold the raw float32 vectors
            invlists, parts, id_parts = _inverted_lists(self._index), [], []
            for number in range(invlists.nlist):
                size = invlists.list_size(number)
                if size:
                    codes = faiss.rev_swig_ptr(invlists.get_codes(number), size * invlists.code_size)
                    parts.append(codes.view(np.float32).reshape(size, self.dim))
                    id_parts.append(faiss.rev_swig_ptr(invlists.get_ids(number), size))
            ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype=np.int64)
            vectors = np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)
        live = ~np.isin(ids, self._tombstones)
        order = np.argsort(ids[live])
        return ids[live][order], vectors[live][order]

    def _ivf_directory(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(list numbers, offsets, ids)` of every vector of an IVF index, sorted by id; cached until changed."""
        if self._directory is None:
            invlists = _inverted_lists(self._index)
            parts = []
            for number in range(invlists.nlist):
                size = invlists.list_size(number)
                if size:
                    ids = faiss.rev_swig_ptr(invlists.get_ids(number), size).copy()
                    parts.append((np.full(size, number), np.arange(size), ids))
            if parts:
                list_numbers, offsets, ids = (np.concatenate(column) for column in zip(*parts, strict=True))
            else:
                list_numbers = offsets = ids = np.zeros(0, dtype=np.int64)
            order = np.argsort(ids)
            self._directory = (list_numbers[order], offsets[order], ids[order])
        return self._directory


def _identity(directory: str | Path) -> tuple[int, int] | None:
    """The directory's (device, inode), which every save changes (it swaps a new directory in); None if missing."""
    try:
        status = os.stat(directory)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _unit_rows(array: np.ndarray, name: str, dim: int | None = None) -> tuple[np.ndarray, bool]:
    """`array` as C-contiguous float32 `(N, D)` unit rows, and whether the rows already were unit."""
    matrix = np.asarray(array)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise UserError(f"{name} must be a non-empty (N, D) array, got shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise UserError(f"{name} have dimension {matrix.shape[1]}, the index holds {dim}-d vectors")
    if not np.issubdtype(matrix.dtype, np.number):
        raise UserError(f"{name} must be numeric, got dtype {matrix.dtype}")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if not np.isfinite(matrix).all():
        raise UserError(f"{name} contain NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0).any():
        raise UserError(f"{name} row {int(np.argmin(norms))} is all zeros and has no direction")
    were_unit = bool(np.all(np.abs(norms - 1.0) < 1e-3))
    return (matrix if were_unit else matrix / norms[:, None]), were_unit


def _plan(n: int, dim: int, kind: str, budget: int | None, on_disk: bool, **options: int | None) -> IndexPlan:
    """The plan `auto` chooses for N vectors within `budget`, or the explicit `kind`'s; `ivf` for lists on disk."""
    requested = IndexKind.parse(kind)
    if on_disk:
        if requested not in (IndexKind.AUTO, IndexKind.IVF):
            raise UserError(f"an on-disk index is of kind 'ivf' (IVF-Flat lists on disk), not {kind!r}; use --type ivf")
        return plan_index(n, dim, IndexKind.IVF, **options)
    if requested is IndexKind.AUTO:
        return choose_index(n, dim, budget, **options)
    return plan_index(n, dim, kind, **options)


class _UnitChunks:
    """Passes over a `VectorStream` as `(first row, unit rows)` pairs, each chunk checked and L2-normalized."""

    def __init__(self, stream: VectorStream, chunk_rows: int) -> None:
        self._stream, self._chunk_rows = stream, chunk_rows
        self.were_unit = True  # every chunk read so far was already L2-normalized

    def read(self, description: str, progress: bool) -> Iterator[tuple[int, np.ndarray]]:
        """One pass from the first row, with a progress bar; `UserError` if the rows do not number `count`."""
        count, start = self._stream.count, 0
        with tqdm(total=count, desc=description, unit="vec", disable=not progress or count < _ADD_CHUNK) as bar:
            for chunk in self._stream.read(self._chunk_rows):
                if start + len(chunk) > count:
                    raise UserError(f"the embeddings hold more than the {count:,} rows their files announce")
                if len(chunk):
                    rows, unit = _unit_rows(chunk, f"embeddings (rows {start:,} on)", self._stream.dim)
                    self.were_unit &= unit
                    yield start, rows
                    start += len(rows)
                    bar.update(len(rows))
        if start != count:
            raise UserError(f"the embeddings hold {start:,} rows where their files announce {count:,}")


def _add_stream(
    index: faiss.Index | ShardedLists | RefineSpill,
    reader: _UnitChunks,
    held_out: np.ndarray,
    queries: np.ndarray | None,
    depth: int,
    progress: bool,
    first_id: int,
) -> np.ndarray:
    """Add every row but the `held_out` ones (sorted positions), ids = first_id + row numbers, in one pass.

    Returns:
        `(Q, depth)` ids of the exact top-`depth` of `queries` among the added rows, merged chunk
        by chunk as they are added; `(0, depth)` when `queries` is None.
    """

    def added() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start, rows in reader.read("indexing", progress):
            positions = np.arange(start, start + len(rows), dtype=np.int64)
            keep = ~np.isin(positions, held_out, assume_unique=True)
            ids = positions[keep] + first_id
            index.add_with_ids(rows[keep], ids)
            yield ids, rows[keep]

    if queries is None:
        for _ in added():
            pass
        return np.zeros((0, depth), dtype=np.int64)
    _, true_ids = exact_neighbors_streamed(added(), queries, depth)
    return true_ids


def _add(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray, progress: bool, description: str) -> None:
    bar = tqdm(total=len(vectors), desc=description, unit="vec", disable=not progress or len(vectors) < _ADD_CHUNK)
    with bar:
        for start in range(0, len(vectors), _ADD_CHUNK):
            stop = min(start + _ADD_CHUNK, len(vectors))
            index.add_with_ids(vectors[start:stop], ids[start:stop])
            bar.update(stop - start)


def _label_space(index: faiss.Index) -> tuple[faiss.Index, Any]:
    """The index FAISS's `ParameterSpace` can tune, and a map from ids to its labels.

    `ParameterSpace` does not look through `IndexIDMap2`, so tuning runs on the wrapped index,
    whose labels are insertion positions.
    """
    if isinstance(index, faiss.IndexIDMap2):
        id_map = faiss.vector_to_array(index.id_map)
        order = np.argsort(id_map)
        return faiss.downcast_index(index.index), lambda ids: order[np.searchsorted(id_map, ids, sorter=order)]
    return index, lambda ids: ids


def _tuning_target(plan: IndexPlan, given: float | None, default: float | None) -> tuple[float | None, str | None]:
    """The recall target to tune to and where it comes from: `("given" | "default" | None)`.

    Exact kinds have nothing to tune, so a default target does not apply to them (a given one is kept).
    """
    if given is not None:
        return given, "given"
    if default is not None and plan.search_parameters:
        return default, "default"
    return None, None


def _set_search_parameters(index: faiss.Index, parameters: Mapping[str, int]) -> None:
    if parameters:
        target = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
        apply_search_parameters(target, ",".join(f"{k}={v}" for k, v in parameters.items()))


def _inverted_lists(index: faiss.Index) -> faiss.InvertedLists:
    """The inverted lists of an IVF index (the index itself or the one it wraps)."""
    invlists = faiss.extract_index_ivf(index).invlists
    if invlists is None:
        raise RuntimeError(f"{type(index).__name__} has no inverted lists")  # a built IVF index always has them
    return invlists


def _padded(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    missing = k - ids.shape[1]
    if missing <= 0:
        return scores.copy(), ids.copy()
    rows = ids.shape[0]
    return (
        np.hstack([scores, np.full((rows, missing), -np.inf, dtype=np.float32)]),
        np.hstack([ids, np.full((rows, missing), -1, dtype=np.int64)]),
    )


def _without_own(found: np.ndarray, own: np.ndarray, k: int) -> np.ndarray:
    """The first k ids of each row of `found` other than that row's `own` id; -1 (no id) fills short rows."""
    keep = found != own[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")
    first = np.take_along_axis(found, order, axis=1)[:, :k]
    return np.where(first == own[:, None], -1, first)


def _bytes_per_vector(index: faiss.Index) -> dict[str, float]:
    """`resident_bytes_per_vector` and `disk_bytes_per_vector` of `index`, over its vectors.

    Resident: what a loaded index holds in memory to search, its `index.faiss`; on-disk inverted
    lists (`lists.ivfdata`) and ivfpq's mapped re-ranking vectors (`refine.faiss`) stay in their
    files, memory-mapped, and only the parts a search touches are read. Disk: all its FAISS files.
    """
    split = without_refine(index)
    resident = _serialized_bytes(index if split is None else split[0])
    disk = resident + (0 if split is None else refine_file_bytes(split[1]))
    lists = lists_file(index)
    if lists is not None:
        disk += lists.stat().st_size
    count = max(int(index.ntotal), 1)
    return {"resident_bytes_per_vector": round(resident / count, 1), "disk_bytes_per_vector": round(disk / count, 1)}


def _serialized_bytes(index: faiss.Index) -> int:
    """The size of `index` as FAISS writes it, counted in FAISS's 1 MiB blocks (never a copy in memory)."""
    size = 0

    def count(block: bytes) -> int:
        nonlocal size
        size += len(block)
        return len(block)

    faiss.write_index(index, faiss.PyCallbackIOWriter(count))  # type: ignore[attr-defined]  # not in FAISS's stubs
    return size


def _measured(measured: Measurement | None, index: faiss.Index, held_out: np.ndarray, given: Any) -> dict[str, Any]:
    if measured is None:
        return {}
    source = "given tuning queries" if given is not None else f"{len(held_out)} build vectors held out while measuring"
    return {
        **measured.as_dict(),
        **_bytes_per_vector(index),
        "queries_from": source,
        "reference": "exact inner-product search over the original vectors",
    }


def _too_few_message(plan: IndexPlan, n: int) -> str:
    lists = plan.parameters.get("nlist")
    return (
        f"kind {plan.kind.value!r} ({plan.factory}) needs at least {plan.min_training_vectors:,} vectors to train "
        f"its centroids (39 per centroid, {lists} lists), got {n:,}; use kind 'flat' or 'hnsw', "
        "a smaller nlist, or more vectors"
    )
