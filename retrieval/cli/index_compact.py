"""`retrieval index compact`: drop the removed vectors hnsw and ivfpq only hide, atomically."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._index_common import add_lock_timeout
from retrieval.index.storage import INDEX_FILE, writing

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index compact`."""
    compact = actions.add_parser("compact", help="drop removed vectors that hnsw/ivfpq only hide (atomic)")
    compact.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    add_lock_timeout(compact)


def run(args: argparse.Namespace) -> int:
    """`index compact`: print how many vectors went and how the index file's size changed."""
    from retrieval.index import SearchIndex

    with writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        before = index.manifest.files[INDEX_FILE].size
        dropped = index.compact()
    after = index.manifest.files[INDEX_FILE].size
    print(
        f"compacted {args.index}: dropped {dropped} removed vectors, {index.ntotal} remain; "
        f"{INDEX_FILE} {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB"
    )
    return 0
