"""`retrieval index query`: search an index with images, embedded by the model the index records."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.cli._common import add_embedding_arguments
from retrieval.cli._index_common import add_checkpoint_check
from retrieval.errors import UserError
from retrieval.index.min_score import STORED, QueryAnswer, QueryMatch, keep_matches, min_score_for, no_match_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from retrieval.index import SearchIndex
    from retrieval.index.filter_language import Filter

__all__ = ["add_parser", "run"]

_FIXED_COLUMNS = ("rank", "score", "id", "label", "path")  # every table shows these


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index query`."""
    query = actions.add_parser("query", help="search the index with images")
    query.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    group = query.add_mutually_exclusive_group(required=True)
    group.add_argument("--image", type=Path, nargs="+", metavar="PATH", help="query image file(s)")
    group.add_argument("--images", type=Path, metavar="DIR", help="every image under DIR is a query")
    query.add_argument("-k", type=int, default=10, help="results per query (default: 10)")
    query.add_argument("--json", action="store_true", help="print JSON instead of a table")
    query.add_argument(
        "--where",
        metavar="EXPR|FILE.json",
        help='search only items whose metadata passes, e.g. "label in (3, 5) and price < 50" or a JSON filter file',
    )
    query.add_argument(
        "--columns",
        metavar="NAME,...",
        help="metadata columns the table shows after label and path (default: the columns --where filters on; "
        "--json shows every column)",
    )
    query.add_argument(
        "--min-score",
        metavar=f"S|{STORED}",
        help="drop results scoring below S (a cosine), or below the threshold the index stores (evaluate "
        "--save-threshold); default: none",
    )
    query.add_argument(
        "--rerank",
        metavar="SPEC",
        help="re-rank results: qe or kreciprocal, with the parameters evaluate --rerank chose, e.g. qe:k=2,alpha=3",
    )
    query.add_argument(
        "--reranker",
        type=Path,
        metavar="DIR",
        help="re-score each query's top results with a learned re-ranker of the index's checkpoint "
        "(retrieval reranker DIR; onnxruntime, reads the results' images)",
    )
    add_checkpoint_check(query)
    add_embedding_arguments(query)


def run(args: argparse.Namespace) -> int:
    """`index query`: embed the query images, search (filtered, re-ranked), print a table or JSON."""
    from retrieval.core.rerank import rerank_at_query
    from retrieval.export.index_encoder import encoder_for_index
    from retrieval.index import SearchIndex
    from retrieval.index.filter_language import load_filter
    from retrieval.index.gallery import IndexGallery
    from retrieval.inference.sources import query_images

    if not 1 <= args.k <= 1000:
        raise UserError(f"-k must be between 1 and 1000, got {args.k}")
    where = load_filter(args.where) if args.where is not None else None
    index = SearchIndex.load(args.index, mmap=True)  # read-only: vectors stay in the page cache, shared
    if where is not None:
        where.check(index.metadata_schema)  # before embedding: a typo in a column name fails at once
    columns = _shown_columns(args.columns, where, index.metadata_schema.names)
    min_score = min_score_for(args.min_score, index.manifest.match_threshold)
    if args.rerank and args.reranker:
        raise UserError("--rerank and --reranker are two re-rankings; pass one")
    if args.min_score is not None and args.reranker is not None:
        raise UserError(
            "--min-score compares cosines, and --reranker's scores blend the cosine with a pair model's probability; "
            "pass one"
        )
    reranker = rerank_at_query(args.rerank) if args.rerank else None
    paths = query_images(args.image, args.images)  # before the model: a missing image fails before PyTorch loads
    learned = None
    if args.reranker is not None:
        from retrieval.export.reranker_onnx import reranker_for_index

        learned = reranker_for_index(args.reranker, index.manifest.model, device=args.device)
    encoder = encoder_for_index(
        index.manifest.model.record(), args.checkpoint, device=args.device, model_dir=args.model
    )
    embedded = encoder.embed_files(paths, args.batch_size, args.num_workers, progress=False)
    if embedded.failures:
        path, reason = embedded.failures[0]
        raise UserError(f"cannot read query image {path} ({reason}); pass a readable image file")
    if learned is not None:
        descriptors = learned.scorer.describe_files(paths)
        scores, ids = learned.search(
            IndexGallery(index, where), embedded.embeddings, descriptors, args.k, lambda found: _paths(index, found)
        )
    elif reranker is None:
        scores, ids = index.search(embedded.embeddings, k=args.k, filter=where)
    else:
        scores, ids = reranker.search(IndexGallery(index, where), embedded.embeddings, args.k)
    answers = [
        QueryAnswer(
            query=str(path),
            min_score=min_score,
            results=keep_matches(_results(index, scores[row], ids[row]), min_score),
        )
        for row, path in enumerate(paths)
    ]
    shown = [answer.model_dump() for answer in answers]
    print(json.dumps(shown, indent=2) if args.json else "\n\n".join(_table(answer, columns) for answer in answers))
    return 0


def _results(index: SearchIndex, scores: np.ndarray, ids: np.ndarray) -> list[QueryMatch]:
    found = ids >= 0  # FAISS pads with -1 when fewer than k vectors are stored
    rows = index.metadata_for(ids[found])
    return [
        QueryMatch.model_validate({**row, "rank": rank, "score": float(score)})
        for rank, (score, row) in enumerate(zip(scores[found], rows, strict=True), start=1)
    ]


def _paths(index: SearchIndex, ids: np.ndarray) -> list[object]:
    """The metadata `path` of each id (None where a row has none): the images a learned re-ranker reads."""
    return [row.get("path") for row in index.metadata_for(ids)]


def _shown_columns(requested: str | None, where: Filter | None, names: list[str]) -> list[str]:
    """The metadata columns the table adds: `--columns`, else those `--where` filters on, in its order.

    Raises:
        UserError: a `--columns` name the metadata lacks.
    """
    if requested is None:
        filtered = [] if where is None else [condition.column for condition in where.leaves()]
        return [name for name in dict.fromkeys(filtered) if name not in _FIXED_COLUMNS]
    columns = [name.strip() for name in requested.split(",") if name.strip()]
    unknown = [name for name in columns if name not in names]
    if unknown:
        raise UserError(f"--columns: {', '.join(unknown)} not in the index's metadata; its columns: {', '.join(names)}")
    return [name for name in dict.fromkeys(columns) if name not in _FIXED_COLUMNS]


def _table(answer: QueryAnswer, columns: Sequence[str] = ()) -> str:
    """Rank, score, id, label and path of each result, then `columns` (empty cells for null), one line each."""
    extra = "".join(f"  {name}" for name in columns)
    lines = [f"query: {answer.query}", f"{'rank':>4}  {'score':>7}  {'id':>8}  {'label':<16}  path{extra}"]
    if not answer.results and answer.min_score is not None:
        lines.append(no_match_text(answer.min_score))
    for result in answer.results:
        label = str(result.column("label") or "")
        values = "".join(f"  {'' if result.column(name) is None else result.column(name)}" for name in columns)
        path = result.column("path")
        lines.append(
            f"{result.rank:>4}  {result.score:>7.4f}  {result.column('id'):>8}  {label:<16}  "
            f"{'' if path is None else path}{values}"
        )
    return "\n".join(lines)
