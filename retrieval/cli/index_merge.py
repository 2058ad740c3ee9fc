"""`retrieval index merge`: the shards built from one trained index (`index train`), joined into one index."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from retrieval.cli._common import output_folder
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.storage import INDEX_FILE, working_directory

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index merge`."""
    merge = actions.add_parser(
        "merge",
        help="merge index shards built from one TRAINED into one index with on-disk lists",
        description="Merge the shards' inverted lists into one lists.ivfdata (memory-mapped when served) and "
        "concatenate their metadata. Refuses shards of another trained index, kind or dimension, or whose ids "
        "overlap, shards built from other inputs or another order, and a split with shards missing. "
        "The output appears whole or not at all.",
    )
    merge.add_argument("shards", type=Path, nargs="+", metavar="SHARD", help="index directories of the shards")
    merge.add_argument("--out", type=Path, required=True, metavar="INDEX_DIR", help="index directory to write")


def run(args: argparse.Namespace) -> int:
    """`index merge`: the shards' lists merged in a working directory beside `--out`, then saved atomically."""
    from retrieval.index.shards import merge_shards

    output_folder(args.out, "--out", INDEX_FILE)  # the save replaces the folder as a whole
    work = working_directory(args.out)
    try:
        index = merge_shards(list(args.shards), work)
        with writer_lock(args.out, DEFAULT_LOCK_TIMEOUT):
            index.save(args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"index: {args.out} ({index.kind}: {index.factory}, lists on disk)")
    print(f"vectors: {index.ntotal} from {len(args.shards)} shards (ids {int(index.ids[0])}..{int(index.ids[-1])})")
    return 0
