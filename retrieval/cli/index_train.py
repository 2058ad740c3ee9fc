"""`retrieval index train`: a trained, empty IVF-Flat index, for one index built on several machines.

`train` writes the trained index; every machine builds its shard of the embedding files with a copy
of it (`index build --embeddings ... --trained TRAINED --shard K/M`, `index_from_files.py`); `index
merge` (`index_merge.py`) joins the shards' inverted lists into one on-disk lists file
(`retrieval.index.shards`). Ids are the rows' numbers over the full ordered list of inputs, the same
on every machine, so shards never share an id.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import output_folder

__all__ = ["add_parser", "run"]


def add_parser(actions: argparse._SubParsersAction) -> None:
    """`index train`."""
    train = actions.add_parser(
        "train",
        help="train an empty IVF index on a sample of embedding files, for shards built on several machines",
        description="Train IVF-Flat's coarse quantizer on a sample of the rows and write it, empty, to TRAINED "
        "(index.faiss and a manifest with its sha256). Copy TRAINED to every machine, build a shard each with "
        "`index build --embeddings ... --trained TRAINED --shard K/M`, then `index merge` the shards.",
    )
    train.add_argument("--embeddings", type=Path, nargs="+", required=True, metavar="PATH", help="all the inputs")
    train.add_argument("--out", type=Path, required=True, metavar="TRAINED", help="directory to write")
    train.add_argument("--nlist", type=int, metavar="N", help="inverted lists (default: about 4·sqrt(rows))")


def run(args: argparse.Namespace) -> int:
    """`index train`: sample, train, write TRAINED."""
    from retrieval.index.from_embeddings import open_embedding_files
    from retrieval.index.shards import train_index
    from retrieval.index.storage import INDEX_FILE

    output_folder(args.out, "--out", INDEX_FILE)  # the save replaces the folder as a whole
    files = open_embedding_files(args.embeddings)
    trained = train_index(files, args.out, nlist=args.nlist)
    print(f"trained: {args.out} ({trained.manifest.factory}, on {trained.manifest.trained_on.rows:,} rows)")
    print(f"sha256: {trained.sha256}")
    return 0
