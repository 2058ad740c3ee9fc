"""Searching an index with query vectors: the one pipeline of `index query` and `serve`, and its result record.

The pipeline: search (FAISS's order, a re-ranking method of `retrieval.core.rerank`, or a learned
re-ranker with the queries' descriptors), drop the -1 ids FAISS pads with when fewer than k items
pass, read each found item's metadata row, and validate each result as a `QueryMatch`. Both
front ends then show the same matches: `index query` as they are (`--json`) or as a table, `serve`
as `SearchResult`s (the API's public path and thumbnail URL in place of the stored path).
Torch-free, like the rest of `retrieval.index`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ConfigDict

from retrieval.validation import Record

if TYPE_CHECKING:
    import numpy as np

    from retrieval.core.rerank import Gallery, Reranker
    from retrieval.index.filter_language import Filter

__all__ = ["LearnedRanking", "LearnedReranker", "QueryAnswer", "QueryMatch", "Searchable", "search_matches"]

PathsOf = Callable[["np.ndarray"], Sequence[Any]]  # ids -> their metadata `path` values (None: no image)


class QueryMatch(Record):
    """One result of a search: its rank (1 first) and score, then the found item's metadata row (`id`, `path`, ...).

    The score is the cosine of the query and the item, or a learned re-ranker's blend. The row's columns
    are the user's own, of the types their files gave them: kept as extra keys, beside `rank` and `score`
    (which an index refuses as column names, `retrieval.index.metadata`), as `index query --json` prints them.
    """

    model_config = ConfigDict(extra="allow")

    rank: int
    score: float

    @property
    def row(self) -> dict[str, Any]:
        """The item's metadata row, as the index stores it."""
        return dict(self.model_extra or {})

    @property
    def id(self) -> int:
        """The found item's id."""
        return int(self.column("id"))

    def column(self, name: str) -> Any:
        """The metadata column `name` of the item (None when its row has none)."""
        return (self.model_extra or {}).get(name)


class QueryAnswer(Record):
    """The answer to one query image of `index query`: its results best first, none below `min_score`."""

    query: str
    min_score: float | None
    results: list[QueryMatch]


class Searchable(Protocol):
    """What the pipeline needs of an index: `SearchIndex` or a database's `CollectionIndex`."""

    def search(
        self,
        vectors: np.ndarray,
        k: int = 10,
        filter: Filter | None = None,  # noqa: A002 - SearchIndex's name
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(scores, ids)`, each `(Q, k)`, best first, among the items passing `filter`; padded with -inf / -1."""
        ...

    def metadata_for(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Metadata rows of `ids` (`id` first), in order; `UserError` on an unknown id (the user's own columns)."""
        ...


class LearnedReranker(Protocol):
    """A learned re-ranker of an index's searches (`retrieval.export.reranker_onnx.IndexReranker`)."""

    def search(
        self, gallery: Gallery, queries: np.ndarray, descriptors: np.ndarray, k: int, paths_of: PathsOf
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` blended scores and ids of queries with embeddings `(n, D)` and descriptors `(n, P)`."""
        ...


@dataclass(frozen=True)
class LearnedRanking:
    """A learned re-ranker and the `(Q, P)` descriptors of the query images it re-scores."""

    reranker: LearnedReranker
    descriptors: np.ndarray


def search_matches(
    index: Searchable,
    queries: np.ndarray,
    k: int,
    where: Filter | None = None,
    reranker: Reranker | None = None,
    learned: LearnedRanking | None = None,
) -> list[list[QueryMatch]]:
    """The matches of each of the `(Q, D)` query embeddings: at most `k`, best first, among the items passing `where`.

    Ordered by FAISS, by `reranker` (a method of `retrieval.core.rerank`), or by `learned` (which reads the
    results' images from the metadata's `path`); at most one of the two re-rankings.

    Raises:
        ValueError: both re-rankings.
        UserError: what the search refuses (a filter on a missing column, an unreadable result image).
    """
    if reranker is not None and learned is not None:
        raise ValueError("search_matches takes one re-ranking: reranker or learned, not both")
    from retrieval.index.gallery import IndexGallery  # numpy: not loaded with the records (the parsers import them)

    if learned is not None:

        def paths_of(ids: np.ndarray) -> list[Any]:
            return [row.get("path") for row in index.metadata_for(ids)]

        scores, ids = learned.reranker.search(IndexGallery(index, where), queries, learned.descriptors, k, paths_of)
    elif reranker is not None:
        scores, ids = reranker.search(IndexGallery(index, where), queries, k)
    else:
        scores, ids = index.search(queries, k=k, filter=where)
    return [_matches(index, scores[row], ids[row]) for row in range(len(ids))]


def _matches(index: Searchable, scores: np.ndarray, ids: np.ndarray) -> list[QueryMatch]:
    """One query's `(k,)` scores and ids as matches: the -1 ids FAISS pads with dropped, each row read once."""
    found = ids >= 0
    rows = index.metadata_for(ids[found])
    return [
        QueryMatch.model_validate({**row, "rank": rank, "score": float(score)})
        for rank, (score, row) in enumerate(zip(scores[found], rows, strict=True), start=1)
    ]
