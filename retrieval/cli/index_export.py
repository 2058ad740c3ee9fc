"""`retrieval index export`: copy an index into a Qdrant collection (idempotent, resumable)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retrieval.vectordb import DEFAULT_BATCH_SIZE, parse_database_uri

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index export`."""
    export = actions.add_parser(
        "export",
        help="copy the index into a vector database collection (Qdrant)",
        description="Upsert the index's vectors, ids and metadata (as payload) into a Qdrant collection. Running it "
        "again writes only what is missing and deletes what the index no longer holds, so it resumes an "
        "interrupted export and changes nothing when the collection is up to date.",
    )
    export.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    export.add_argument(
        "--to",
        required=True,
        metavar="URI",
        help="qdrant+local:///abs/dir?collection=NAME (embedded, a folder), qdrant://HOST[:PORT]/NAME or "
        "qdrants://HOST[:PORT]/NAME (a server; API key from $QDRANT_API_KEY)",
    )
    export.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help=f"points per request (default: {DEFAULT_BATCH_SIZE})"
    )
    export.add_argument("--recreate", action="store_true", help="delete the collection first, whatever it holds")


def run(args: argparse.Namespace) -> int:
    """`index export`: print how many vectors were written, kept and deleted."""
    from retrieval.vectordb.upload import export_index  # needs the optional qdrant-client

    # A bar only on a terminal: in a log its carriage returns pile up into one unreadable line.
    bar = sys.stderr.isatty()
    done = export_index(args.index, parse_database_uri(args.to), args.batch_size, args.recreate, progress=bar)
    print(
        f"exported {args.index} to {done.location}: {done.vectors} vectors ({done.written} written, "
        f"{done.kept} already there, {done.deleted} removed)"
    )
    return 0
