"""`retrieval index merge`: the shards built from one trained index (`index train`), joined into one index."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import output_folder
from retrieval.index.storage import INDEX_FILE

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
    """`index merge`: the shards merged beside `--out`, then saved atomically (`merge_into`)."""
    from retrieval.index.shards import merge_into

    output_folder(args.out, "--out", INDEX_FILE)  # the save replaces the folder as a whole
    index = merge_into(list(args.shards), args.out)
    print(f"index: {args.out} ({index.kind}: {index.factory}, lists on disk)")
    print(f"vectors: {index.ntotal} from {len(args.shards)} shards (ids {int(index.ids[0])}..{int(index.ids[-1])})")
    return 0
