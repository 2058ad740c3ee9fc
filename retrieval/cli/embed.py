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
`index build` does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval.choices.splits import SPLITS
from retrieval.cli._common import add_column_types_argument, add_embedding_arguments, existing_checkpoint
from retrieval.cli._progress import showing_progress
from retrieval.embedding_files.file_formats import EMBEDDING_SUFFIXES
from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.checkpoint import Checkpoint
    from retrieval.config import DataConfig
    from retrieval.inference.sources import ImageSource

__all__ = ["DEFAULT_PART_ROWS", "add_parser", "run"]

DEFAULT_PART_ROWS = 100_000  # ~50 MB of 128-d float32 a part: few files for 10M images, little work lost to a kill


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
    """Embed the images; in a log, where no bar shows, a line every so often says how far it is."""
    with showing_progress("embed"):
        return _embed(args)


def _embed(args: argparse.Namespace) -> int:
    directory = _parts_directory(args.out)
    if directory is None:
        _check_one_file(Path(args.out), args.part_rows)
    else:
        refuse_file_in_the_way(directory, f"--out {args.out}")
        if args.part_rows is not None and args.part_rows < 1:
            raise UserError(f"--part-rows must be >= 1, got {args.part_rows}")
    from retrieval.core.column_types import parse_column_types
    from retrieval.embedding_files.file_formats import write_embeddings
    from retrieval.inference.sources import dataset_source, embed_source, read_source

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
    column_types = parse_column_types(args.column_types)
    # The images of --csv or --images and the checkpoint's presence before PyTorch loads (a configured
    # dataset's images need the checkpoint's config).
    source = None if args.overrides else read_source(args.csv, args.images, args.split, column_types)
    existing_checkpoint(args.checkpoint)
    from retrieval.checkpoint import Checkpoint
    from retrieval.inference.image_encoder import ImageEncoder

    checkpoint = Checkpoint.read(args.checkpoint)
    if source is None:
        source = dataset_source(_data_config(checkpoint, args.overrides), args.split, column_types)
    if directory is not None:
        return _embed_parts(args, checkpoint, source, directory)
    encoder = ImageEncoder.from_loaded(checkpoint, args.checkpoint, device=args.device)
    embeddings, rows = embed_source(encoder, source, args.batch_size, args.num_workers)
    ids, labels = rows["path"], rows["label"]
    extra = {name: rows[name] for name in rows.column_names if name not in ("path", "label")}
    write_embeddings(args.out, embeddings, ids, labels, extra, encoder.checkpoint_sha256)
    skipped = len(source.paths) - len(ids)
    print(
        f"embeddings: {args.out} ({len(ids)} x {embeddings.shape[1]})"
        + (f"; {skipped} unreadable image(s) skipped" if skipped else "")
    )
    return 0


def _parts_directory(out: str) -> Path | None:
    """The folder `--out` names for parts (a trailing slash, or an existing folder), else None: one file."""
    path = Path(out)
    return path if out.endswith(("/", os.sep)) or path.is_dir() else None


def _check_one_file(out: Path, part_rows: int | None) -> None:
    """Refuse a one-file `--out` that cannot be written as asked."""
    if out.suffix.lower() not in EMBEDDING_SUFFIXES:
        raise UserError(
            f"--out {out}: end the name with {', '.join(EMBEDDING_SUFFIXES)} to choose the format, "
            "or with / for a folder of parts"
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError(f"--out {out} is one file, but torchrun started several processes; pass a folder: --out DIR/")
    if part_rows is not None:
        raise UserError(f"--part-rows is for a folder of parts; pass --out {out.with_suffix('')}/ or drop it")
    refuse_file_in_the_way(out.parent, f"--out {out}: its folder {out.parent}")


def _embed_parts(args: argparse.Namespace, checkpoint: Checkpoint, source: ImageSource, directory: Path) -> int:
    """Embed `source` into parts in `directory`, over every process torchrun started (or in this one alone)."""
    from retrieval.inference.image_encoder import ImageEncoder
    from retrieval.inference.parts_job import embed_in_parts
    from retrieval.runtime.device import resolve_device
    from retrieval.runtime.distributed import process_group

    part_rows = args.part_rows or DEFAULT_PART_ROWS
    with process_group(args.device) as context:
        device = context.process_device(resolve_device(args.device))
        encoder = ImageEncoder.from_loaded(checkpoint, args.checkpoint, device=str(device))
        summary = embed_in_parts(
            encoder, source, directory, part_rows, args.batch_size, args.num_workers, context, _source_info(args)
        )
        if context.is_main:
            print(
                f"embeddings: {directory}/ ({summary.rows} x {summary.dim} in {summary.parts} part(s) of {part_rows} "
                f"images; {summary.embedded} embedded now, {summary.parts - summary.embedded} already done"
                + (f"; {summary.skipped} unreadable image(s) skipped)" if summary.skipped else ")")
            )
    return 0


def _source_info(args: argparse.Namespace) -> dict[str, Any]:
    """What the images are, as the command line named them: a rerun resumes parts of the same images only."""
    if args.csv is not None:
        return {"csv": str(args.csv.resolve()), "split": args.split}
    if args.images is not None:
        return {"images": str(args.images.resolve()), "split": args.split}
    return {"set": list(args.overrides), "split": args.split}


def _data_config(checkpoint: Checkpoint, overrides: list[str]) -> DataConfig:
    """The checkpoint's data section with `overrides` (data.* keys only: the model is the checkpoint's)."""
    other = [item for item in overrides if not item.strip().startswith("data.")]
    if other:
        raise UserError(f"embed --set takes data.* keys only (the model is the checkpoint's), got {other[0]!r}")
    return checkpoint.config(overrides=overrides).data
