"""`retrieval embed`: embeddings of images with a trained checkpoint, written to one file or to parts.

    retrieval embed --checkpoint CKPT (--csv FILE | --images DIR | --set data.KEY=VALUE ...) --out FILE|DIR/
    torchrun --nproc_per_node N -m retrieval embed ... --out DIR/ [--part-rows 100000]

The images come from a dataset CSV, a folder (labels: the first-level subfolder names), or a
dataset configured with `--set data.*` on top of the checkpoint's own data section (e.g.
`--set data.name=cub200 --set data.root=/data/CUB_200_2011`). `--split` picks rows as for
`index build`. The model, its evaluation preprocessing and its precision are the checkpoint's own, as
`retrieval evaluate` runs them (`ImageEncoder`).
`--out` ends in `.npz`, `.npy` or `.parquet`; each holds the embeddings, ids (absolute image
paths) and labels, as described in `retrieval.embedding_files.file_formats`. `--out DIR/` (a trailing
slash, or an existing folder) writes parquet parts of `--part-rows` images and `_SUCCESS`, in one
process or split over torchrun's processes, and a rerun resumes a killed job
(`retrieval.inference.parts_job`). Unreadable images are left out and listed on stderr, as
`index build` does. This module parses and prints; the job is `retrieval.inference.embed_run` (an
`EmbedRequest` in, an `EmbedReport` out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.choices.splits import SPLITS
from retrieval.cli._common import add_column_types_argument, add_embedding_arguments
from retrieval.cli._progress import showing_progress
from retrieval.embedding_files.file_formats import EMBEDDING_SUFFIXES
from retrieval.inference.embed_run import DEFAULT_PART_ROWS

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "embed",
        help="write embeddings, ids and labels of images to .npz / .npy / .parquet, or parquet parts in DIR/",
        description="Embed images with a checkpoint's model and eval transform and write one file: embeddings "
        "(N, D) float32 unit vectors, ids (absolute image paths) and labels, plus the source's other columns. "
        "The format follows the --out suffix (.npz arrays, .npy structured array, .parquet table); --out DIR/ "
        "writes parquet parts and _SUCCESS, under torchrun split over the processes, and a rerun resumes it. "
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
    parser.add_argument(
        "--out", required=True, metavar="FILE|DIR/", help=f"{' | '.join(EMBEDDING_SUFFIXES)} | DIR/ for parts"
    )
    parser.add_argument(
        "--part-rows", type=int, metavar="N", help=f"images per part of --out DIR/ (default: {DEFAULT_PART_ROWS})"
    )
    add_column_types_argument(parser)
    add_embedding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Embed the images; in a log, where no bar shows, a line every so often says how far it is.

    What the arguments, the paths and the files' headers can tell is checked before PyTorch loads.
    """
    from retrieval.inference.embed_run import EmbedRequest, check_embed_request, run_embed

    request = EmbedRequest(
        checkpoint=args.checkpoint,
        out=args.out,
        csv=args.csv,
        images=args.images,
        overrides=tuple(args.overrides),
        split=args.split,
        part_rows=args.part_rows,
        column_types=args.column_types,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        device=args.device,
    )
    with showing_progress("embed"):
        report = run_embed(request, check_embed_request(request))
    if report.main_process:
        print(report.text())
    return 0
