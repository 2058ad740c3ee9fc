"""`retrieval index eval`: recall@k against exact search, latency and bytes per vector of a saved index."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrieval.cli._index_common import format_measurement
from retrieval.errors import UserError

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index eval`."""
    evaluate = actions.add_parser("eval", help="recall@k vs exact search, latency and bytes/vector")
    evaluate.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    evaluate.add_argument("-k", type=int, default=10, help="recall@k and results per query (default: 10)")
    evaluate.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """`index eval`: leave-one-out over up to 1,000 stored vectors (`SearchIndex.evaluate`)."""
    from retrieval.index import SearchIndex

    if args.k < 1:
        raise UserError(f"-k must be >= 1, got {args.k}")
    index = SearchIndex.load(args.index)
    metrics = index.evaluate(k=args.k)
    if args.json:
        print(json.dumps(metrics.as_dict(), indent=2))
    else:
        print(f"index: {args.index} ({index.kind}: {index.factory}), {index.ntotal} vectors")
        print(format_measurement(metrics))
    return 0
