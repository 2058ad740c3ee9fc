"""`Searcher`: the blocking work behind each route (decode, embed, search, thumbnail), run in the threadpool.

One lock serializes the model and one the index (FAISS and torch already use every core for one
call, and search parameters are index state); uploads that arrive together share one forward pass
(`EmbedBatcher`). Each method takes the current `IndexView` once and
uses it to the end, so a reload in between never mixes two versions. The only image files ever
read are the ones listed in the index's metadata, looked up by id; every decoded image holds its
share of the `DecodeBudget` from decode to embedding.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from retrieval.core.match_threshold import MatchThreshold
from retrieval.core.rerank import DatabaseAugmentation, Reranker, stored_augmentation
from retrieval.errors import BackendFailed, UserError
from retrieval.export.index_encoder import encoder_for_index
from retrieval.export.reranker_onnx import IndexReranker
from retrieval.index import SearchIndex
from retrieval.index.filter_language import Filter
from retrieval.index.query import LearnedRanking, search_matches
from retrieval.inference.interface import Encoder
from retrieval.serve.backend import SearchBackend, Views
from retrieval.serve.batching import BatchPolicy, EmbedBatcher
from retrieval.serve.budget import DecodeBudget
from retrieval.serve.errors import RequestError
from retrieval.serve.limits import ServeLimits
from retrieval.serve.parsing import INT64_MAX, INT64_MIN, MAX_K, parse_vector
from retrieval.serve.public import PublicPaths, public_info
from retrieval.serve.responses import IndexInfo, Item, SearchResult
from retrieval.serve.uploads import (
    BYTES_PER_PIXEL,
    ImageTooLarge,
    load_pixels,
    open_image,
    preprocess_bytes,
    thumbnail,
)

__all__ = ["IndexView", "Searcher", "load_view"]


@dataclass(frozen=True)
class IndexView:
    """One loaded version of the index (a FAISS index or a database collection) and the model that embeds queries."""

    index: SearchBackend
    encoder: Encoder | None
    info: IndexInfo  # the manifest's public fields (`public_info`)
    # the augmentation its stored vectors were built with (`stored_augmentation`, read once a load); None: plain
    augmentation: DatabaseAugmentation | None = None

    @property
    def threshold(self) -> MatchThreshold | None:
        """The index's stored match threshold (what `min_score: "stored"` means), checked when the index was read."""
        return self.info.match_threshold


def load_view(
    path: Path,
    previous: IndexView | None,
    checkpoint: str | Path | None,
    device: str,
    model_dir: str | Path | None = None,
) -> IndexView:
    """Load the index at `path`; the previous view's model is kept when the index records the same model file.

    Raises:
        UserError: the index or its checkpoint cannot be loaded.
    """
    index = SearchIndex.load(path, mmap=True)  # served read-only: vectors mapped, shared through the page cache
    model_info = index.manifest.model
    recorded = model_info.identity
    if previous is not None and previous.encoder is not None and previous.encoder.info().identity == recorded:
        encoder: Encoder | None = previous.encoder
    else:
        encoder = encoder_for_index(model_info, checkpoint, device, model_dir) if recorded else None
    manifest = index.manifest
    augmentation = stored_augmentation(manifest.database_augmentation)
    return IndexView(index, encoder, public_info(manifest, index.metadata_schema), augmentation)


class Searcher:
    """Answers for the routes; every method is blocking and raises `RequestError` for a request's mistake."""

    def __init__(
        self,
        live: Views[IndexView],
        paths: PublicPaths,
        limits: ServeLimits,
        search_threads: int,
        reranker: Reranker | None = None,
        batching: BatchPolicy | None = None,
        learned: IndexReranker | None = None,
    ) -> None:
        self.live = live
        self.reranker = reranker  # `serve --rerank`: every search re-ranked (`retrieval.core.rerank`)
        # `serve --reranker`: searches by image or by id re-scored by a learned re-ranker; by vector there is no image
        self.learned = learned
        self.paths = paths
        self.limits = limits
        self.search_threads = search_threads
        self.decoding = DecodeBudget(limits.decode_memory, limits.decode_wait)
        self._model_lock = threading.Lock()
        self.embedding = EmbedBatcher(batching or BatchPolicy(), self._model_lock)
        self._index_lock = threading.Lock()
        self.thumbnail = lru_cache(maxsize=limits.thumb_cache)(self._thumbnail_of_file)

    def by_image(self, data: bytes, k: int, where: Filter | None = None) -> list[SearchResult]:
        """Search with an uploaded image (among the items passing `where`, as for every search)."""
        view = self.live.current()
        if view.encoder is None:
            raise RequestError(400, "this index records no model; search it by vector or id")
        try:
            image = open_image(data, self.limits.max_pixels)
            resized = view.encoder.resized_size(image.width, image.height)
            with self.decoding.hold(preprocess_bytes(image, resized, self.limits.max_pixels)):
                try:
                    # decoded before it joins a batch, so that a broken file fails alone
                    vector = self.embedding.embed(view.encoder, image, decode=lambda: load_pixels(image))
                    descriptors = None
                    if self.learned is not None:
                        with self._model_lock:
                            descriptors = self.learned.scorer.describe_images([image])
                finally:
                    image.close()  # frees the pixels before the memory is handed back
        except ImageTooLarge as exc:
            raise RequestError(413, str(exc)) from exc
        except UserError as exc:
            raise RequestError(400, str(exc)) from exc
        return self._search(view, vector, k, where, descriptors)

    def by_vector(self, values: Any, k: int, where: Filter | None = None) -> list[SearchResult]:
        """Search with a JSON list of numbers, checked against the dimension of the index it searches."""
        view = self.live.current()
        return self._search(view, parse_vector(values, view.index.dim)[None], k, where)

    def by_id(self, item_id: int, k: int, where: Filter | None = None) -> list[SearchResult]:
        """More like this: the item's nearest neighbours, the item itself left out."""
        view = self.live.current()
        row = self._row(view, item_id)  # 404 for an unknown id
        with self._index_lock:
            vector = np.asarray(view.index.reconstruct(item_id), dtype=np.float32)
        descriptors = None
        if self.learned is not None:
            try:
                with self._model_lock:
                    descriptors = self.learned.describe_item(item_id, row.get("path"))
            except UserError as exc:
                raise RequestError(400, str(exc)) from exc
        results = self._search(view, vector[None], min(k + 1, MAX_K + 1), where, descriptors)
        return [result for result in results if result.id != item_id][:k]

    def thumb(self, item_id: int) -> tuple[bytes, str]:
        """The thumbnail of an item's image: `(JPEG bytes, media type)`, cached by file."""
        listed = self._row(self.live.current(), item_id).get("path")  # the only way a file name reaches the disk
        if not listed:
            raise RequestError(404, f"item {item_id} has no image path in the index metadata")
        try:
            size = Path(listed).stat().st_size
            if size > self.limits.max_file_bytes:
                raise RequestError(404, f"the image of item {item_id} is too large for a thumbnail ({size} bytes)")
            return self.thumbnail(listed)
        except (OSError, UserError) as exc:
            raise RequestError(404, f"the image of item {item_id} cannot be read ({exc.__class__.__name__})") from exc

    def _thumbnail_of_file(self, path: str) -> tuple[bytes, str]:
        image = open_image(Path(path).read_bytes(), self.limits.max_pixels)
        with self.decoding.hold(image.width * image.height * BYTES_PER_PIXEL):
            try:
                load_pixels(image, draft_size=self.limits.thumb_size)
                return thumbnail(image, self.limits.thumb_size)
            finally:
                image.close()

    def _row(self, view: IndexView, item_id: int) -> dict[str, Any]:
        """The metadata row of `item_id` (private fields included); 404 for an id that is not stored.

        A row holds the user's own columns, of the types their files gave them: free-form by design.
        """
        if not INT64_MIN <= item_id <= INT64_MAX:
            raise RequestError(404, f"unknown id {item_id}: ids are 64-bit integers")
        try:
            with self._index_lock:
                (row,) = view.index.metadata_for([item_id])
        except BackendFailed:
            raise  # the database's failure, not an unknown id: a 503 (`create_app`'s handler)
        except UserError as exc:
            raise RequestError(404, f"unknown id {item_id}") from exc
        return row

    def _search(
        self,
        view: IndexView,
        vectors: np.ndarray,
        k: int,
        where: Filter | None = None,
        descriptors: np.ndarray | None = None,
    ) -> list[SearchResult]:
        """The results of `vectors` (one query) by `search_matches`: re-ranked by the learned re-ranker where the
        query's `descriptors` are given, else by `--rerank`'s method or none."""
        learned = None
        if self.learned is not None and descriptors is not None:
            self._check_learned(view)
            learned = LearnedRanking(self.learned, descriptors)
        # OpenMP's thread count is per calling thread: set it in this threadpool worker, not once at start.
        faiss.omp_set_num_threads(self.search_threads)
        with self._index_lock, self._model_lock if learned is not None else nullcontext():
            try:
                (matches,) = search_matches(view.index, vectors, k, where, self.reranker, learned)
            except BackendFailed:
                raise
            except UserError as exc:  # the query is valid by now: a filter naming a missing column or type
                raise RequestError(400, str(exc)) from exc
        return [SearchResult.model_validate({**self._public(match.row), "score": match.score}) for match in matches]

    def check_min_score(self, minimum: float | None) -> None:
        """Refuse a `min_score` on a search the learned re-ranker re-scores: its scores are blends, not cosines."""
        if minimum is not None and self.learned is not None:
            raise RequestError(
                400,
                "min_score compares cosines, and this server re-scores searches by image and by id with a learned "
                "re-ranker (its scores blend the cosine with a pair model's probability): leave out min_score",
            )

    def _check_learned(self, view: IndexView) -> None:
        """Refuse a search of an index version embedded by another checkpoint than the learned re-ranker's, or
        stored otherwise augmented than when the re-ranker was checked against it."""
        assert self.learned is not None
        info = None if view.encoder is None else view.encoder.info()
        sha256 = None if info is None else info.trained_checkpoint
        if sha256 != self.learned.checkpoint_sha256:
            raise RequestError(409, "the index now records another model than the re-ranker's: restart serve")
        if view.augmentation != self.learned.augmentation:
            raise RequestError(409, "the index now stores other vectors than the re-ranker's: restart serve")

    def item(self, item_id: int) -> Item:
        """The public fields of one item."""
        return Item.model_validate(self._public(self._row(self.live.current(), item_id)))

    def _public(self, row: dict[str, Any]) -> dict[str, Any]:
        """An item's fields as the API shows them (`Item`, or `SearchResult` once a search adds the score): its path
        relative to the image root (or None), never absolute."""
        item_id = int(row["id"])
        path = self.paths.show(row.get("path"))
        return {
            "id": item_id,
            "label": row.get("label"),
            "path": path,
            "metadata": {**row, "path": path} if "path" in row else row,
            "thumb": f"/thumb/{item_id}",
        }
