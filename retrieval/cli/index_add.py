"""`retrieval index add`: embed more images into an index with the model it records, atomically."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import add_embedding_arguments
from retrieval.cli._index_common import add_checkpoint_check, add_image_inputs, add_lock_timeout
from retrieval.errors import UserError
from retrieval.index.storage import writing

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
    """`index add`: embed before taking the writer lock, so a long embedding does not hold other writers up.

    `SearchIndex.add` augments the new vectors as the index's build did (database-side augmentation). The
    columns the index has are read as the index stores them (a string column keeps `1.10` as written).
    """
    from retrieval.core.column_types import column_types_of, parse_column_types
    from retrieval.export.index_encoder import encoder_for_index
    from retrieval.index import SearchIndex
    from retrieval.index.metadata import Metadata
    from retrieval.index.storage import METADATA_FILE, read_manifest
    from retrieval.inference.sources import embed_source, read_source

    model = read_manifest(args.index).model  # checked against the verified load under the lock
    encoder = encoder_for_index(model, args.checkpoint, device=args.device, model_dir=args.model)
    stored = column_types_of(Metadata.read(args.index / METADATA_FILE).table.schema)
    source = read_source(args.csv, args.images, args.split, parse_column_types(args.column_types), stored)
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    with writing(args.index), SearchIndex.edit(args.index, args.lock_timeout) as index:
        if index.manifest.model != model:
            raise UserError(
                f"{args.index} was rebuilt with another model while the images were embedded; run add again"
            )
        ids = index.add(embeddings, rows)
    print(f"added {len(ids)} vectors (ids {ids.min()}..{ids.max()}); the index holds {index.ntotal}")
    return 0
