"""`retrieval index build --embeddings PATH...`: an index from the files `retrieval embed` wrote, no model needed.

The vectors are streamed (see `SearchIndex.build_streamed`): memory holds the index, FAISS's
training sample and one chunk, not the N embeddings. Ids are the rows' numbers 0..N-1 in the
order of the paths given (a parts directory in part order). The manifest records the files and the
checkpoint's sha256, as the files record it or as `--checkpoint CKPT` names it (for files with no room
for it: `.npy`, plain arrays); `index query` and `index add` with images then need that checkpoint
(`--checkpoint`). Only the sha256 is recorded, not the path, so that shards built on machines that
mount the checkpoint at other places merge.
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
from retrieval.runtime.files import file_sha256

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
        UserError: images or another model were given too, the files are unreadable (see `open_embedding_files`),
            `--checkpoint` is not the checkpoint they record, or `--trained`/`--shard` do not fit them
            (see `shard_inputs`).
    """
    from retrieval.index import SearchIndex
    from retrieval.index.build import IndexBuildOptions
    from retrieval.index.from_embeddings import open_embedding_files
    from retrieval.inference.interface import ModelInfo

    flags = (
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
    checkpoint_sha256 = _checkpoint_sha256(files.checkpoint_sha256, args.checkpoint)
    model = ModelInfo(checkpoint_sha256=checkpoint_sha256) if checkpoint_sha256 else ModelInfo()
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


def _checkpoint_sha256(recorded: str | None, checkpoint: Path | None) -> str | None:
    """The sha256 of the checkpoint that made the embeddings: the files' record, or `--checkpoint`'s, which must agree.

    Raises:
        UserError: `--checkpoint` is missing, or is not the checkpoint the files record.
    """
    if checkpoint is None:
        return recorded
    if not checkpoint.is_file():
        raise UserError(f"checkpoint not found: {checkpoint}; pass the checkpoint that made the embeddings")
    actual = file_sha256(checkpoint)
    if recorded is not None and actual != recorded:
        raise UserError(
            f"--checkpoint {checkpoint} did not make these embeddings (sha256 {actual[:12]}... != {recorded[:12]}... "
            "recorded in the files); pass that checkpoint or leave --checkpoint out"
        )
    return actual
