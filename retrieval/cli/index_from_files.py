"""`retrieval index build --embeddings PATH...`: an index from the files `retrieval embed` wrote, no model needed.

The vectors are streamed (see `SearchIndex.build_streamed`): memory holds the index, FAISS's
training sample and one chunk, not the N embeddings. Ids are the rows' numbers 0..N-1 in the
order of the paths given (a parts directory in part order). The manifest records the files and,
when they say so, the checkpoint's sha256; `index query` and `index add` with images then need
that checkpoint (`--checkpoint`).
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.cli.index_shards import shard_inputs
from retrieval.errors import UserError
from retrieval.index.storage import working_directory

if TYPE_CHECKING:
    from retrieval.index import SearchIndex

__all__ = ["add_embeddings_arguments", "built_from_embeddings"]


def add_embeddings_arguments(parser: argparse.ArgumentParser) -> None:
    """`--embeddings` of `index build`."""
    parser.add_argument(
        "--embeddings",
        type=Path,
        nargs="+",
        metavar="PATH",
        help="build from embed's .parquet/.npy/.npz files or DIR/ of parts instead of images (no model needed)",
    )
    parser.add_argument(
        "--on-disk",
        action="store_true",
        help="with --embeddings: IVF-Flat whose inverted lists stay on disk, memory-mapped (larger than RAM)",
    )


@contextmanager
def built_from_embeddings(
    args: argparse.Namespace, target_recall: float | None, default_target_recall: float | None
) -> Iterator[tuple[SearchIndex, str]]:
    """The index of `args.embeddings` and the line that says what it was built from, valid until the block ends.

    `target_recall` and `default_target_recall` are `IndexBuildOptions`', from `--target-recall`.

    The build's large files (`--on-disk`'s inverted lists, ivfpq's re-ranking vectors) are written
    to a working directory beside `--out`, removed when the block ends (once the index is saved, its
    directory holds a link to them).

    With `--trained` (and `--shard K/M`) it builds a shard: this shard's inputs added to a copy of the
    trained index, ids from the shard's first row number, neither tuned nor measured (`index merge`).

    Raises:
        UserError: images or a checkpoint were given too, the files are unreadable (see `open_embedding_files`),
            or `--trained`/`--shard` do not fit them (see `shard_inputs`).
    """
    from retrieval.index import SearchIndex
    from retrieval.index.build import IndexBuildOptions
    from retrieval.index.from_embeddings import open_embedding_files

    flags = (
        ("--checkpoint", args.checkpoint),
        ("--model", args.model),
        ("--backbone", args.backbone),
        ("--csv", args.csv),
        ("--images", args.images),
    )
    given = [flag for flag, value in flags if value]
    if given:
        raise UserError(f"--embeddings builds from vectors already made: drop {', '.join(given)}")
    inputs = shard_inputs(args, open_embedding_files(args.embeddings))
    files, first_id, trained = inputs.files, inputs.first_id, inputs.trained
    model = {"checkpoint_sha256": files.checkpoint_sha256} if files.checkpoint_sha256 else {}
    work = working_directory(args.out)
    try:
        options = IndexBuildOptions(
            kind=args.type if trained is None else trained.manifest.kind,
            max_memory=args.max_memory or None,
            target_recall=target_recall if trained is None else None,  # a shard is measured once merged
            default_target_recall=default_target_recall if trained is None else None,
            nlist=None if trained is None else trained.manifest.parameters.nlist,
            model_info=model,
            sources=files.sources(),
            on_disk=work if args.on_disk else None,
            refine_directory=work,
        )
        trained_index = None if trained is None else trained.index
        index = SearchIndex.build_streamed(
            files.stream, files.metadata(), options, trained=trained_index, first_id=first_id
        )
        if trained is not None:  # `index merge` merges the shards of one trained index and one list of inputs only
            index.manifest.trained, index.manifest.shard = trained.sha256, inputs.record
        yield (
            index,
            f"vectors: {index.ntotal} from {len(files.files)} embedding input(s)"
            + (f", ids {first_id}..{first_id + index.ntotal - 1}" if trained is not None else ""),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
