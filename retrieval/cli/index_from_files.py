"""`retrieval index build --embeddings PATH...`: an index from the files `retrieval embed` wrote, no model needed.

The flags (`--embeddings`, `--on-disk`, and `--trained TRAINED --shard K/M` for one shard of an index
trained by `index train`) and the line printed; the build (streamed, all the files or one shard of
them) is `retrieval.index.from_files`. `--checkpoint CKPT` names the checkpoint that made files with no room
to record it (`.npy`, plain arrays), for `index query` and `index add` with images.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.errors import UserError

if TYPE_CHECKING:
    from retrieval.index import SearchIndex

__all__ = ["add_embeddings_arguments", "add_shard_arguments", "built_from_embeddings", "parse_shard"]

# argparse's own test for a value that looks like an option but is a negative number, widened to
# `-1/2`: so that `--shard -1/2` reaches `parse_shard`'s one-line message instead of "expected one argument".
_NEGATIVE_OR_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$|^-[^-\s]*/")


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

    `target_recall` and `default_target_recall` are `IndexBuildOptions`', from `--target-recall`; the
    build is `retrieval.index.from_files.built_from_files` (with `--trained` and `--shard K/M`, a shard).

    Raises:
        UserError: images or another model were given too, a malformed `--shard`, or what `built_from_files`
            refuses.
    """
    from retrieval.index.build import IndexBuildOptions
    from retrieval.index.from_files import built_from_files

    flags = (
        ("--model", args.model),
        ("--backbone", args.backbone),
        ("--csv", args.csv),
        ("--images", args.images),
    )
    given = [flag for flag, value in flags if value]
    if given:
        raise UserError(f"--embeddings builds from vectors already made: drop {', '.join(given)}")
    options = IndexBuildOptions(
        kind=args.type,
        max_memory=args.max_memory or None,
        target_recall=target_recall,
        default_target_recall=default_target_recall,
    )
    shard = None if args.shard is None else parse_shard(args.shard)
    with built_from_files(
        args.embeddings, args.out, options, args.checkpoint, args.on_disk, args.trained, shard
    ) as built:
        index, first_id = built.index, built.first_id
        yield (
            index,
            f"vectors: {index.ntotal} from {built.files} embedding input(s)"
            + (f", ids {first_id}..{first_id + index.ntotal - 1}" if built.shard else ""),
        )


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


def parse_shard(text: str) -> tuple[int, int]:
    """A `--shard` value `K/M`: shard K of M, 0 <= K < M.

    Raises:
        UserError: another form, or K out of range.
    """
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if match is None or not int(match[1]) < int(match[2]):
        raise UserError(f"--shard takes K/M with 0 <= K < M (shard K of M, like 0/8), got {text!r}")
    return int(match[1]), int(match[2])
