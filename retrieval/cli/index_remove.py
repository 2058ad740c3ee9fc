"""`retrieval index remove`: remove vectors by id, atomically."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._index_common import add_lock_timeout
from retrieval.errors import UserError
from retrieval.index.storage import writing

__all__ = ["add_parser", "run"]

_MAX_ID = 2**63 - 1  # ids are int64


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index remove`."""
    remove = actions.add_parser("remove", help="remove vectors by id (atomic)")
    remove.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    remove.add_argument("--ids", type=int, nargs="+", required=True, metavar="ID", help="ids from query results")
    add_lock_timeout(remove)


def run(args: argparse.Namespace) -> int:
    """`index remove`: unknown ids are refused before anything changes."""
    import numpy as np

    from retrieval.index import SearchIndex

    outside = [value for value in args.ids if not 0 <= value <= _MAX_ID]
    if outside:
        raise UserError(f"id {outside[0]} is out of range: ids are integers from 0 to {_MAX_ID}, from query results")
    ids = np.unique(np.asarray(args.ids, dtype=np.int64))
    with writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        removed = index.remove(ids)  # UserError naming unknown ids, before anything changes
    print(f"removed {removed} vectors; the index holds {index.ntotal}")
    return 0
