"""`retrieval index build --embeddings PATH...`: an index from the files `retrieval embed` wrote, no model needed.

The flags (`--embeddings`, `--on-disk`, and `--trained TRAINED --shard K/M` for one shard of an index
trained by `index train`); the build (streamed, all the files or one shard of them) is
`retrieval.index.from_files`, through `retrieval.export.index_build`. `--checkpoint CKPT` names the
checkpoint that made files with no room to record it (`.npy`, plain arrays), for `index query` and
`index add` with images.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from retrieval.errors import UserError

__all__ = ["add_embeddings_arguments", "add_shard_arguments", "parse_shard"]

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
