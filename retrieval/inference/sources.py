"""The images that `index` and `embed` read: rows of a dataset CSV, every image under a folder, or a dataset's splits.

A CSV is read by `retrieval.data.csv_dataset.read_csv_rows`, the reader training uses, so a value
it does not know (a split, an is_gallery flag) is the same one-line error in every command. Its
cells become typed metadata here, once for the whole source (`retrieval.core.column_types`: numbers
are numbers, empty cells null, `--column-types` declares a column's type).
`embed_source` embeds the images with an `Encoder` (a checkpoint's or an export's), reporting unreadable
files on stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from retrieval.choices.splits import SPLITS
from retrieval.config import DataConfig
from retrieval.core.column_types import ColumnType, typed_table
from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.data.csv_dataset import IMAGE_LIST_CSV, CsvSplit, flag_is_set, read_csv_rows
from retrieval.data.folder import list_images
from retrieval.data.splits import read_splits
from retrieval.errors import UserError
from retrieval.inference.interface import Encoder

__all__ = [
    "ImageSource",
    "dataset_source",
    "embed_source",
    "image_files",
    "query_images",
    "read_source",
    "report_unreadable",
    "spec_source",
]

_MAX_SHOWN_FAILURES = 20


@dataclass(frozen=True)
class ImageSource:
    """Image files to embed and one metadata row each (`path` absolute, `label`, any extra CSV columns), typed."""

    paths: list[Path]
    metadata: pa.Table  # one row per path; column types decided over every row

    def rows(self, positions: np.ndarray) -> pa.Table:
        """The metadata rows of the files at `positions` (those that could be embedded), with the source's types."""
        return self.metadata.take(pa.array(np.asarray(positions, dtype=np.int64)))


def read_source(
    csv_path: Path | None,
    images_dir: Path | None,
    split: str = "all",
    column_types: dict[str, ColumnType] | None = None,
    stored_types: dict[str, ColumnType] | None = None,
) -> ImageSource:
    """Images of `--csv FILE` (rows of `split`) or of `--images DIR` (labels: first-level subfolder names).

    `column_types`: declared metadata types (`--column-types`); other columns are inferred, except those
    of `stored_types` (an index's own columns, for `index add`), read as the index stores them.
    """
    if csv_path is not None:
        (paths, columns), name, where = _read_csv(csv_path, split), str(csv_path), f"{csv_path} (split={split})"
    elif images_dir is not None:
        (paths, columns), name, where = _read_folder(images_dir), str(images_dir), str(images_dir)
    else:
        raise UserError("no images given; pass --csv FILE or --images DIR")
    if not paths:  # before typing the columns: an empty source fails without loading Arrow's pandas layer
        raise UserError(f"no images to index in {where}; check the path and --split")
    return ImageSource(paths, typed_table(columns, column_types or {}, name, stored_types or {}))


def spec_source(spec: ImageSourceSpec, column_types: dict[str, ColumnType] | None = None) -> ImageSource:
    """The images a recorded spec names: its CSV's rows of its split (all when unset), or its folder's images.

    Raises:
        ValueError: a spec of a configured dataset (`set`): its images need the dataset's config (`dataset_source`).
        UserError: as `read_source`.
    """
    if spec.set is not None:
        raise ValueError("a spec of a configured dataset is read with dataset_source and the dataset's config")
    csv_path, images = (Path(spec.csv) if spec.csv else None), (Path(spec.images) if spec.images else None)
    return read_source(csv_path, None if csv_path else images, spec.split or "all", column_types)


def image_files(directory: Path) -> list[Path]:
    """Every file under `directory` (recursively) whose extension Pillow reads, sorted."""
    if not directory.is_dir():
        raise UserError(f"image folder not found: {directory}; pass a folder of images with --images")
    return list_images(directory)


def query_images(files: list[Path] | None, folder: Path | None) -> list[Path]:
    """The query images of `--image FILE...`, each an existing file, or every image under `--images DIR`.

    Raises:
        UserError: a file that is not there, or a folder without images.
    """
    if files:
        missing = next((path for path in files if not path.is_file()), None)
        if missing is not None:
            raise UserError(
                f"query image not found: {missing}; pass image files with --image, or a folder with --images"
            )
        return list(files)
    if folder is None:
        raise UserError("no query images given; pass --image FILE... or --images DIR")
    paths = image_files(folder)
    if not paths:
        raise UserError(f"no images in {folder}; pass query images with --image or --images")
    return paths


def dataset_source(
    data: DataConfig, split: str = "all", column_types: dict[str, ColumnType] | None = None
) -> ImageSource:
    """The images of a configured dataset (`data.name` csv, folder or a benchmark) before validation holdouts.

    Columns: `path`, `label` (the dataset's own class id: CUB/Cars class number, SOP class_id,
    In-Shop item id, folder name, CSV label), `split`, and `is_query`/`is_gallery` (`1`/`0`) when
    the test split has a query/gallery protocol. `split` as for a CSV: all, train, val, test or
    gallery (test images that queries search: In-Shop's gallery, every test image elsewhere).
    """
    if split not in SPLITS:
        raise UserError(f"unknown --split {split!r}; use one of: {', '.join(SPLITS)}")
    splits = read_splits(data)
    chosen = {"all": list(splits), "gallery": ["test"]}.get(split, [split])
    if not all(name in splits for name in chosen):
        raise UserError(
            f"data.name {data.name} has no {split} split; use --split with one of: all, {', '.join(splits)}"
        )
    has_flags = splits["test"].query_mask is not None
    parts = [_split_source(splits[name], name, split == "gallery", has_flags) for name in chosen]
    columns = {key: [value for _, part in parts for value in part[key]] for key in parts[0][1]}
    paths = [path for part_paths, _ in parts for path in part_paths]
    return ImageSource(paths, typed_table(columns, column_types, f"data.name {data.name}"))


def _split_source(
    part: CsvSplit, name: str, gallery_only: bool, has_flags: bool
) -> tuple[list[Path], dict[str, list[str]]]:
    """One split's rows: `gallery_only` keeps its gallery images; `has_flags` adds is_query / is_gallery."""
    everything = np.ones(len(part.paths), dtype=bool)
    query = part.query_mask if part.query_mask is not None else everything
    gallery = part.gallery_mask if part.gallery_mask is not None else everything
    if name != "test":  # training and validation images are neither queries nor gallery
        query, gallery = ~everything, ~everything
    rows = np.flatnonzero(gallery) if gallery_only else np.flatnonzero(everything)
    paths = [part.paths[i].resolve() for i in rows]
    columns = {
        "path": [str(path) for path in paths],
        "label": [part.class_names[part.labels[i]] for i in rows],
        "split": [name] * len(rows),
    }
    if has_flags:
        columns.update(
            {"is_query": [str(int(query[i])) for i in rows], "is_gallery": [str(int(gallery[i])) for i in rows]}
        )
    return paths, columns


def embed_source(
    encoder: Encoder, source: ImageSource, batch_size: int, num_workers: int
) -> tuple[np.ndarray, pa.Table]:
    """`(M, D)` embeddings of the readable files of `source` and their metadata rows; the rest reported on stderr.

    Raises:
        UserError: if no file could be read.
    """
    embedded = encoder.embed_files(source.paths, batch_size, num_workers)
    report_unreadable(embedded.failures)
    if not len(embedded.positions):
        raise UserError(f"none of the {len(source.paths)} images could be read; check the files")
    return embedded.embeddings, source.rows(embedded.positions)


def report_unreadable(failures: list[tuple[str, str]]) -> None:
    """List the `(path, reason)` of files that could not be read on stderr (the first few, then a count)."""
    if not failures:
        return
    print(f"skipped {len(failures)} unreadable image(s):", file=sys.stderr)
    for path, reason in failures[:_MAX_SHOWN_FAILURES]:
        print(f"  {path}: {reason}", file=sys.stderr)
    if len(failures) > _MAX_SHOWN_FAILURES:
        print(f"  ... and {len(failures) - _MAX_SHOWN_FAILURES} more", file=sys.stderr)


def _read_folder(directory: Path) -> tuple[list[Path], dict[str, list[str]]]:
    """The images under `directory` and their text columns: `path`, and `label` (the first-level subfolder)."""
    paths = image_files(directory)
    labels = [p.relative_to(directory).parts[0] if len(p.relative_to(directory).parts) > 1 else "" for p in paths]
    return [p.resolve() for p in paths], {"path": [str(p.resolve()) for p in paths], "label": labels}


def _read_csv(csv_path: Path, split: str) -> tuple[list[Path], dict[str, list[str]]]:
    """The images of `split`'s rows in a CSV and their text columns (the one strict reader: only `path` required)."""
    if split not in SPLITS:
        raise UserError(f"unknown --split {split!r}; use one of: {', '.join(SPLITS)}")
    columns, rows = read_csv_rows(csv_path, IMAGE_LIST_CSV)
    if split != "all" and "split" not in columns:
        raise UserError(f"--split {split} needs a 'split' column in {csv_path}; use --split all")
    rows = [row for row in rows if _in_split(row, split)]
    paths = [(csv_path.parent / row["path"]).resolve() for row in rows]
    metadata = {"path": [str(p) for p in paths], "label": [row.get("label", "") for row in rows]}
    metadata.update({name: [row[name] for row in rows] for name in columns if name not in metadata})
    return paths, metadata


def _in_split(row: dict[str, str], split: str) -> bool:
    """Whether a row belongs to `--split` (`gallery`: a test row whose is_gallery flag, if any, is set)."""
    if split == "all":
        return True
    if split == "gallery":
        return row["split"] == "test" and flag_is_set(row.get("is_gallery", "1"))
    return row["split"] == split
