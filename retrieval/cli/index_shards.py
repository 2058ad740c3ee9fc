"""`retrieval index train`, `index build --trained TRAINED --shard K/M` and `index merge`: one index, several machines.

`train` writes a trained, empty IVF-Flat index; every machine builds its shard of the embedding
files with a copy of it; `merge` joins the shards' inverted lists into one on-disk lists file
(`retrieval.index.shards`). Ids are the rows' numbers over the full ordered list of inputs, the
same on every machine, so shards never share an id.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from retrieval.errors import UserError
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.storage import working_directory

__all__ = [
    "add_merge_parser",
    "add_shard_arguments",
    "add_train_parser",
    "parse_shard",
    "run_merge",
    "run_train",
]

# argparse's own test for a value that looks like an option but is a negative number, widened to
# `-1/2`: so that `--shard -1/2` reaches `parse_shard`'s one-line message instead of "expected one argument".
_NEGATIVE_OR_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$|^-[^-\s]*/")


def add_train_parser(actions: argparse._SubParsersAction) -> None:
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


def add_merge_parser(actions: argparse._SubParsersAction) -> None:
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


def add_shard_arguments(build: argparse.ArgumentParser) -> None:
    """`--trained` and `--shard` of `index build --embeddings`."""
    build.add_argument(
        "--trained",
        type=Path,
        metavar="TRAINED",
        help="with --embeddings: add the rows to this trained index (index train) instead of training one",
    )
    build._negative_number_matcher = _NEGATIVE_OR_NUMBER
    build.add_argument(
        "--shard",
        metavar="K/M",
        help="with --trained: build shard K (0-based) of M from the full, same-order list of inputs; ids are row "
        "numbers over all of them; then index merge",
    )


def run_train(args: argparse.Namespace) -> int:
    """`index train`: sample, train, write TRAINED."""
    from retrieval.index.from_embeddings import open_embedding_files
    from retrieval.index.shards import train_index

    files = open_embedding_files(args.embeddings)
    trained = train_index(files, args.out, nlist=args.nlist)
    print(f"trained: {args.out} ({trained.manifest.factory}, on {trained.manifest.trained_on.rows:,} rows)")
    print(f"sha256: {trained.sha256}")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """`index merge`: the shards' lists merged in a working directory beside `--out`, then saved atomically."""
    from retrieval.index.shards import merge_shards

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


def parse_shard(text: str) -> tuple[int, int]:
    """A `--shard` value `K/M`: shard K of M, 0 <= K < M.

    Raises:
        UserError: another form, or K out of range.
    """
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if match is None or not int(match[1]) < int(match[2]):
        raise UserError(f"--shard takes K/M with 0 <= K < M (shard K of M, like 0/8), got {text!r}")
    return int(match[1]), int(match[2])
