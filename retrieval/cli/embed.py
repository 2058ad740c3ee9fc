"""`retrieval embed`: embeddings of images with a trained checkpoint, written to one file for use elsewhere.

    retrieval embed --checkpoint CKPT (--csv FILE | --images DIR | --set data.KEY=VALUE ...) --out FILE

The images come from a dataset CSV, a folder (labels: the first-level subfolder names), or a
dataset configured with `--set data.*` on top of the checkpoint's own data section (e.g.
`--set data.name=cub200 --set data.root=/data/CUB_200_2011`). `--split` picks rows as for
`index build`. The model, its evaluation preprocessing and its precision are the checkpoint's own, as
`retrieval evaluate` runs them (`ImageEncoder`).
`--out` ends in `.npz`, `.npy` or `.parquet`; each holds the embeddings, ids (absolute image
paths) and labels, as described in `retrieval.inference.embeddings_file`. Unreadable images are
left out and listed on stderr, as `index build` does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.checkpoint import Checkpoint
from retrieval.cli._common import add_embedding_arguments
from retrieval.config import DataConfig
from retrieval.errors import UserError
from retrieval.inference.embeddings_file import EMBEDDING_SUFFIXES, write_embeddings
from retrieval.inference.encoder import ImageEncoder
from retrieval.inference.sources import SPLITS, dataset_source, embed_source, read_source

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "embed",
        help="write embeddings, ids and labels of images to .npz / .npy / .parquet",
        description="Embed images with a checkpoint's model and eval transform and write one file: embeddings "
        "(N, D) float32 unit vectors, ids (absolute image paths) and labels, plus the source's other columns. "
        "The format follows the --out suffix (.npz arrays, .npy structured array, .parquet table). "
        "Unreadable images are left out and listed on stderr.",
    )
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT", help="a run's checkpoints/best.pt")
    inputs = parser.add_mutually_exclusive_group()
    inputs.add_argument("--csv", type=Path, metavar="FILE", help="dataset CSV: path,label,split[,...]")
    inputs.add_argument("--images", type=Path, metavar="DIR", help="every image under DIR; label = its subfolder")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="data.KEY=VALUE",
        help="embed a configured dataset: data.* keys over the checkpoint's data section (repeatable)",
    )
    parser.add_argument(
        "--split",
        default="all",
        choices=SPLITS,
        help="rows of a CSV or dataset: all (default), train, val, test, gallery",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help=f"{' | '.join(EMBEDDING_SUFFIXES)}")
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.out.suffix.lower() not in EMBEDDING_SUFFIXES:
        raise UserError(f"--out {args.out}: end the name with {', '.join(EMBEDDING_SUFFIXES)} to choose the format")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    given = [flag for flag, value in (("--csv", args.csv), ("--images", args.images)) if value] + (
        ["--set"] if args.overrides else []
    )
    if len(given) != 1:
        raise UserError(
            f"give exactly one image source, got {' and '.join(given) or 'none'}: --csv FILE, --images DIR, "
            "or --set data.name=... --set data.root=... (a configured dataset)"
        )
    checkpoint = Checkpoint.load(args.checkpoint)
    encoder = ImageEncoder.from_loaded(checkpoint, args.checkpoint, device=args.device)
    if args.overrides:
        source = dataset_source(_data_config(checkpoint, args.overrides), args.split)
    else:
        source = read_source(args.csv, args.images, args.split)
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    ids, labels = rows.pop("path"), rows.pop("label")
    write_embeddings(args.out, embeddings, ids, labels, rows)
    skipped = len(source.paths) - len(ids)
    print(
        f"embeddings: {args.out} ({len(ids)} x {embeddings.shape[1]})"
        + (f"; {skipped} unreadable image(s) skipped" if skipped else "")
    )
    return 0


def _data_config(checkpoint: Checkpoint, overrides: list[str]) -> DataConfig:
    """The checkpoint's data section with `overrides` (data.* keys only: the model is the checkpoint's)."""
    other = [item for item in overrides if not item.strip().startswith("data.")]
    if other:
        raise UserError(f"embed --set takes data.* keys only (the model is the checkpoint's), got {other[0]!r}")
    return checkpoint.config(overrides=overrides).data
