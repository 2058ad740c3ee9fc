"""`retrieval index query`: search an index with images, embedded by the model the index records.

The flags and the table; the query is `retrieval.export.index_query` (a `QueryRequest` in, a `QueryReport` out).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli._common import add_embedding_arguments
from retrieval.cli._index_common import add_checkpoint_check
from retrieval.index.min_score import STORED, no_match_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from retrieval.index.query import QueryAnswer

__all__ = ["add_parser", "run"]


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
        type=_names,
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
    from retrieval.export.index_query import QueryRequest, query_index

    request = QueryRequest(
        index=args.index,
        images=tuple(args.image or ()),
        folder=args.images,
        k=args.k,
        where=args.where,
        columns=args.columns,
        min_score=args.min_score,
        rerank=args.rerank,
        reranker=args.reranker,
        checkpoint=args.checkpoint,
        model=args.model,
        device=args.device,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    report = query_index(request)
    print(report.json_text() if args.json else "\n\n".join(_table(answer, report.columns) for answer in report.answers))
    return 0


def _names(text: str) -> tuple[str, ...]:
    """A `--columns` value: comma-separated column names, blanks dropped."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


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
