"""`retrieval embed` as one function: a checkpoint's embeddings of images, to a file or parts, from an `EmbedRequest`.

The images are a CSV's rows, a folder's images, or a dataset configured by `data.*` overrides of the
checkpoint's own data section (`source_spec`). `check_embed_request` answers what the request, the
paths and the files' headers can tell without PyTorch, and reads the images of a CSV or a folder;
`run_embed` embeds them with the checkpoint's model, evaluation preprocessing and precision
(`ImageEncoder`) into one `.npz` / `.npy` / `.parquet` file (`retrieval.embedding_files.file_formats`)
or into parts in a folder, in this process or split over torchrun's (`retrieval.inference.parts_job`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.choices.splits import SPLITS
from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.embedding_files.file_formats import EMBEDDING_SUFFIXES
from retrieval.errors import UserError
from retrieval.runtime.checkpoint_files import existing_checkpoint
from retrieval.runtime.directories import refuse_file_in_the_way

if TYPE_CHECKING:
    from retrieval.checkpoint import Checkpoint
    from retrieval.inference.parts_job import PartsSummary
    from retrieval.inference.sources import ImageSource

__all__ = ["DEFAULT_PART_ROWS", "EmbedReport", "EmbedRequest", "check_embed_request", "run_embed"]

DEFAULT_PART_ROWS = 100_000  # ~50 MB of 128-d float32 a part: few files for 10M images, little work lost to a kill


@dataclass(frozen=True)
class EmbedRequest:
    """What to embed with which checkpoint, and where to: the flags of `retrieval embed`, by name.

    Attributes:
        checkpoint: the model's checkpoint.
        out: a file whose suffix names its format, or a folder of parts (`DIR/`, or an existing folder).
        csv, images, overrides: the images, exactly one of a CSV, a folder (labels: first-level subfolder
            names) or `data.*` overrides of the checkpoint's data section (a configured dataset).
        split: the rows of a CSV or dataset: all, train, val, test or gallery.
        part_rows: images per part of a folder (`DEFAULT_PART_ROWS` when None).
        column_types: metadata column types, `NAME=TYPE,...` (`retrieval.core.column_types`).
        batch_size, num_workers, device: images per forward pass, decoding processes, where the model runs.

    A request that cannot apply (a `UserError` from `check_embed_request`) is worded with the flags of
    `retrieval embed`, the one place users make it.

    Raises:
        ValueError: `split` is not one of `SPLITS`.
    """

    checkpoint: Path
    out: str
    csv: Path | None = None
    images: Path | None = None
    overrides: tuple[str, ...] = ()
    split: str = "all"
    part_rows: int | None = None
    column_types: str | None = None
    batch_size: int = 64
    num_workers: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")

    def parts_directory(self) -> Path | None:
        """The folder `out` names for parts (a trailing slash, or an existing folder), else None: one file."""
        path = Path(self.out)
        return path if self.out.endswith(("/", os.sep)) or path.is_dir() else None

    def source_spec(self) -> ImageSourceSpec:
        """What the images are, paths resolved: parts record it, so that a rerun resumes parts of the same images."""
        if self.csv is not None:
            return ImageSourceSpec(csv=str(self.csv.resolve()), split=self.split)
        if self.images is not None:
            return ImageSourceSpec(images=str(self.images.resolve()), split=self.split)
        return ImageSourceSpec(set=list(self.overrides), split=self.split)


@dataclass(frozen=True)
class EmbedReport:
    """What `run_embed` wrote: how many embeddings of which dimension, and how many images it could not read.

    Attributes:
        out: the file or folder, as the request named it.
        rows, dim: the embeddings written, `(rows, dim)`; `skipped`: unreadable images left out.
        parts: for a folder of parts, what it holds and how much of it this run embedded; None for one file.
        part_rows: images per part of a folder.
        main_process: whether this process is rank 0 (or the only one), the one that prints.
    """

    out: str
    rows: int
    dim: int
    skipped: int
    parts: PartsSummary | None = None
    part_rows: int = DEFAULT_PART_ROWS
    main_process: bool = True

    def text(self) -> str:
        """The line `retrieval embed` prints: where the embeddings are, their shape, and what was skipped."""
        if self.parts is None:
            return f"embeddings: {self.out} ({self.rows} x {self.dim})" + (
                f"; {self.skipped} unreadable image(s) skipped" if self.skipped else ""
            )
        summary = self.parts
        return (
            f"embeddings: {Path(self.out)}/ ({summary.rows} x {summary.dim} in {summary.parts} part(s) of "
            f"{self.part_rows} images; {summary.embedded} embedded now, {summary.parts - summary.embedded} already done"
            + (f"; {summary.skipped} unreadable image(s) skipped)" if summary.skipped else ")")
        )


def check_embed_request(request: EmbedRequest) -> ImageSource | None:
    """Refuse what the request, the paths and the files' headers tell is wrong, without PyTorch; the images.

    Returns the images of a CSV or a folder, or None for a configured dataset, whose images need the
    checkpoint's config (read by `run_embed`).

    Raises:
        UserError: an output that cannot be written as asked, a batch size < 1, not exactly one image
            source, a bad column type, no images to read, a missing checkpoint, or a `--set` key outside data.
    """
    from retrieval.core.column_types import parse_column_types
    from retrieval.inference.sources import read_source

    directory = request.parts_directory()
    if directory is None:
        _check_one_file(Path(request.out), request.part_rows)
    else:
        refuse_file_in_the_way(directory, f"--out {request.out}")
        if request.part_rows is not None and request.part_rows < 1:
            raise UserError(f"--part-rows must be >= 1, got {request.part_rows}")
    if request.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {request.batch_size}")
    _check_one_source(request)
    column_types = parse_column_types(request.column_types)
    source = None if request.overrides else read_source(request.csv, request.images, request.split, column_types)
    existing_checkpoint(request.checkpoint)
    other = [item for item in request.overrides if not item.strip().startswith("data.")]
    if other:
        raise UserError(f"embed --set takes data.* keys only (the model is the checkpoint's), got {other[0]!r}")
    return source


def run_embed(request: EmbedRequest, source: ImageSource | None = None) -> EmbedReport:
    """Embed the images and write them to `request.out`; a folder of parts over every process torchrun started.

    Unreadable images are listed on stderr and left out. A rerun into a folder of parts resumes it.

    Args:
        request: what to embed and where.
        source: the images, when `check_embed_request` read them already (checked and read here when None).

    Raises:
        UserError: as `check_embed_request`, `Checkpoint.read`, or no image could be read.
    """
    from retrieval.checkpoint import Checkpoint
    from retrieval.core.column_types import parse_column_types
    from retrieval.inference.sources import dataset_source

    if source is None:
        source = check_embed_request(request)
    checkpoint = Checkpoint.read(request.checkpoint)
    if source is None:  # a configured dataset: the checkpoint's data section with the request's data.* keys
        data = checkpoint.config(overrides=list(request.overrides)).data
        source = dataset_source(data, request.split, parse_column_types(request.column_types))
    directory = request.parts_directory()
    if directory is None:
        return _embed_one_file(request, checkpoint, source)
    return _embed_parts(request, checkpoint, source, directory)


def _check_one_source(request: EmbedRequest) -> None:
    """Refuse a request that names no image source, or more than one."""
    given = [flag for flag, value in (("--csv", request.csv), ("--images", request.images)) if value] + (
        ["--set"] if request.overrides else []
    )
    if len(given) != 1:
        raise UserError(
            f"give exactly one image source, got {' and '.join(given) or 'none'}: --csv FILE, --images DIR, "
            "or --set data.name=... --set data.root=... (a configured dataset)"
        )


def _check_one_file(out: Path, part_rows: int | None) -> None:
    """Refuse a one-file output that cannot be written as asked."""
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


def _embed_one_file(request: EmbedRequest, checkpoint: Checkpoint, source: ImageSource) -> EmbedReport:
    """Embed `source` in this process and write one file."""
    from retrieval.embedding_files.file_formats import write_embeddings
    from retrieval.inference.image_encoder import ImageEncoder
    from retrieval.inference.sources import embed_source

    encoder = ImageEncoder.from_loaded(checkpoint, request.checkpoint, device=request.device)
    embeddings, rows = embed_source(encoder, source, request.batch_size, request.num_workers)
    ids, labels = rows["path"], rows["label"]
    extra = {name: rows[name] for name in rows.column_names if name not in ("path", "label")}
    write_embeddings(request.out, embeddings, ids, labels, extra, encoder.checkpoint_sha256)
    return EmbedReport(request.out, len(ids), embeddings.shape[1], len(source.paths) - len(ids))


def _embed_parts(request: EmbedRequest, checkpoint: Checkpoint, source: ImageSource, directory: Path) -> EmbedReport:
    """Embed `source` into parts in `directory`, over every process torchrun started (or in this one alone)."""
    from retrieval.inference.image_encoder import ImageEncoder
    from retrieval.inference.parts_job import embed_in_parts
    from retrieval.runtime.device import resolve_device
    from retrieval.runtime.distributed import process_group

    part_rows = request.part_rows or DEFAULT_PART_ROWS
    with process_group(request.device) as context:
        device = context.process_device(resolve_device(request.device))
        encoder = ImageEncoder.from_loaded(checkpoint, request.checkpoint, device=str(device))
        summary = embed_in_parts(
            encoder,
            source,
            directory,
            part_rows,
            request.batch_size,
            request.num_workers,
            context,
            request.source_spec(),
        )
    return EmbedReport(request.out, summary.rows, summary.dim, summary.skipped, summary, part_rows, context.is_main)
