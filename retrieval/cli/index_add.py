"""`retrieval index add`: embed more images into an index with the model it records, atomically."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import add_embedding_arguments
from retrieval.cli._index_common import add_checkpoint_check, add_image_inputs, add_lock_timeout

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index add`."""
    add = actions.add_parser("add", help="embed more images into an index (atomic)")
    add.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR")
    add_image_inputs(add)
    add_checkpoint_check(add)
    add_lock_timeout(add)
    add_embedding_arguments(add)


def run(args: argparse.Namespace) -> int:
    """`index add`: the images embedded, then added under the index's writer lock (`add_to_index`)."""
    from retrieval.export.index_add import IndexAddRequest, add_to_index

    request = IndexAddRequest(
        index=args.index,
        csv=args.csv,
        images=args.images,
        split=args.split,
        column_types=args.column_types,
        checkpoint=args.checkpoint,
        model=args.model,
        device=args.device,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        lock_timeout=args.lock_timeout,
    )
    report = add_to_index(request)
    ids = report.ids
    print(f"added {len(ids)} vectors (ids {ids.min()}..{ids.max()}); the index holds {report.stored}")
    return 0
