"""Querying an index with image files, from a `QueryRequest` to a `QueryReport`: what `retrieval index query` runs.

The query images are embedded by the model the index records (`encoder_for_index`: its export with
onnxruntime, or its checkpoint with torch, imported only then), then searched by the one pipeline
`serve` searches with too (`retrieval.index.query.search_matches`): filtered, re-ranked by a method or
a learned re-ranker, results below the minimum score dropped. Everything the request, the index's
manifest and metadata and the query files can tell is checked before the model loads: a filter on a
missing column, an unknown `columns` name, a minimum the index cannot give, a missing query image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.core.rerank import rerank_at_query, stored_augmentation
from retrieval.errors import UserError
from retrieval.index.min_score import keep_matches, min_score_for
from retrieval.index.query import LearnedRanking, QueryAnswer, search_matches

if TYPE_CHECKING:
    import numpy as np

    from retrieval.export.reranker_onnx import IndexReranker
    from retrieval.index import SearchIndex
    from retrieval.index.filter_language import Filter

__all__ = ["MAX_K", "QueryReport", "QueryRequest", "query_index"]

MAX_K = 1000  # results per query image
_FIXED_COLUMNS = ("rank", "score", "id", "label", "path")  # every table shows these


@dataclass(frozen=True)
class QueryRequest:
    """The flags of `retrieval index query`, by name; checked when made (before the index is read).

    Attributes:
        index: the index directory.
        images: the query image files; or else `folder`, every image under it a query.
        k: results per query, 1 to `MAX_K`.
        where: search only items whose metadata passes: an expression or a JSON filter file
            (`retrieval.index.filter_language`).
        columns: metadata columns the table shows after label and path; None: those `where` filters on.
        min_score: drop results scoring below this cosine, or below the index's stored match threshold
            (`stored`); None: keep them all.
        rerank: a query-time re-ranking spec (`qe:k=2,alpha=3`, `kreciprocal:...`); or else `reranker`, a
            learned re-ranker directory of the index's checkpoint (onnxruntime; reads the results' images).
        checkpoint, model: the index's checkpoint or export directory if it moved (the same file).
        device, batch_size, num_workers: how the query images are embedded.

    Requests that contradict themselves are worded with the flags of `index query`, where users make them.

    Raises:
        UserError: `k` out of range, two re-rankings, or a minimum score with a learned re-ranker.
    """

    index: Path
    images: tuple[Path, ...] = ()
    folder: Path | None = None
    k: int = 10
    where: str | None = None
    columns: tuple[str, ...] | None = None
    min_score: str | None = None
    rerank: str | None = None
    reranker: Path | None = None
    checkpoint: Path | None = None
    model: Path | None = None
    device: str = "auto"
    batch_size: int = 64
    num_workers: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.k <= MAX_K:
            raise UserError(f"-k must be between 1 and {MAX_K}, got {self.k}")
        if self.rerank and self.reranker:
            raise UserError("--rerank and --reranker are two re-rankings; pass one")
        if self.rerank:
            rerank_at_query(self.rerank)  # dba or a bad value, before the index or the model loads
        if self.min_score is not None and self.reranker is not None:
            raise UserError(
                "--min-score compares cosines, and --reranker's scores blend the cosine with a pair model's "
                "probability; pass one"
            )


@dataclass(frozen=True)
class QueryReport:
    """What a query found: one answer per query image, in the request's order, and the columns a table shows.

    Attributes:
        answers: each query image's matches, best first, none below its minimum score.
        columns: the metadata columns a table shows after rank, score, id, label and path.
    """

    answers: list[QueryAnswer]
    columns: list[str]

    def json_text(self) -> str:
        """The answers as `index query --json` prints them."""
        return json.dumps([answer.model_dump() for answer in self.answers], indent=2)


def query_index(request: QueryRequest) -> QueryReport:
    """Embed the query images with the index's model and search the index with them, as `request` asks.

    Raises:
        UserError: the index, the filter, a column, the minimum score, a query image, the re-ranker or
            the model cannot be used (before the model loads, except an image that cannot be decoded).
    """
    from retrieval.index import SearchIndex
    from retrieval.inference.sources import query_images

    where = _filter(request.where)
    index = SearchIndex.load(request.index, mmap=True)  # read-only: vectors stay in the page cache, shared
    if where is not None:
        where.check(index.metadata_schema)  # before embedding: a typo in a column name fails at once
    columns = _shown_columns(request.columns, where, index.metadata_schema.names)
    min_score = min_score_for(request.min_score, index.manifest.match_threshold)
    reranker = rerank_at_query(request.rerank) if request.rerank else None
    paths = query_images(list(request.images), request.folder)  # before the model: PyTorch need not load
    learned = _learned_reranker(request, index)
    embeddings = _embedded(request, index, paths)
    ranking = None if learned is None else LearnedRanking(learned, learned.scorer.describe_files(paths))
    matches = search_matches(index, embeddings, request.k, where, reranker, ranking)
    answers = [
        QueryAnswer(query=str(path), min_score=min_score, results=keep_matches(found, min_score))
        for path, found in zip(paths, matches, strict=True)
    ]
    return QueryReport(answers, columns)


def _filter(where: str | None) -> Filter | None:
    """The filter of `where` (an expression or a JSON filter file), None without one."""
    from retrieval.index.filter_language import load_filter

    return None if where is None else load_filter(where)


def _learned_reranker(request: QueryRequest, index: SearchIndex) -> IndexReranker | None:
    """The learned re-ranker of `request.reranker`, checked against the index's model (before the model loads)."""
    if request.reranker is None:
        return None
    from retrieval.export.reranker_onnx import reranker_for_index

    manifest = index.manifest
    augmentation = stored_augmentation(manifest.database_augmentation)
    return reranker_for_index(request.reranker, manifest.model, augmentation, device=request.device)


def _embedded(request: QueryRequest, index: SearchIndex, paths: list[Path]) -> np.ndarray:
    """`(Q, D)` embeddings of the query images by the index's model.

    Raises:
        UserError: the model is not the index's, or a query image cannot be read.
    """
    from retrieval.export.index_encoder import encoder_for_index

    encoder = encoder_for_index(
        index.manifest.model, request.checkpoint, device=request.device, model_dir=request.model
    )
    embedded = encoder.embed_files(paths, request.batch_size, request.num_workers, progress=False)
    if embedded.failures:
        path, reason = embedded.failures[0]
        raise UserError(f"cannot read query image {path} ({reason}); pass a readable image file")
    return embedded.embeddings


def _shown_columns(requested: tuple[str, ...] | None, where: Filter | None, names: list[str]) -> list[str]:
    """The metadata columns the table adds: `requested`, else those `where` filters on, in its order.

    Raises:
        UserError: a requested name the metadata lacks.
    """
    if requested is None:
        filtered = [] if where is None else [condition.column for condition in where.leaves()]
        return [name for name in dict.fromkeys(filtered) if name not in _FIXED_COLUMNS]
    unknown = [name for name in requested if name not in names]
    if unknown:
        raise UserError(f"--columns: {', '.join(unknown)} not in the index's metadata; its columns: {', '.join(names)}")
    return [name for name in dict.fromkeys(requested) if name not in _FIXED_COLUMNS]
