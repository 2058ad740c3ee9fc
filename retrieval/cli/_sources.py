"""The images an index command reads: rows of a dataset CSV, or every image file under a folder."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from retrieval.errors import UserError

__all__ = ["SPLITS", "ImageSource", "image_files", "read_source"]

# `--split` values: which CSV rows are indexed. `gallery`: test rows with is_gallery=1 (all test rows
# when the CSV has no is_gallery column): the images a benchmark's queries search.
SPLITS = ("all", "train", "val", "test", "gallery")
_TRUE = {"1", "true", "yes"}


@dataclass(frozen=True)
class ImageSource:
    """Image files to embed and one metadata row each (`path` absolute, `label`, any extra CSV columns)."""

    paths: list[Path]
    columns: dict[str, list[str]]  # column name -> one string per path

    def rows(self, positions: np.ndarray) -> dict[str, list[str]]:
        """The metadata columns of the files at `positions` (those that could be embedded)."""
        return {name: [values[i] for i in positions] for name, values in self.columns.items()}


def read_source(csv_path: Path | None, images_dir: Path | None, split: str = "all") -> ImageSource:
    """Images of `--csv FILE` (rows of `split`) or of `--images DIR` (labels: first-level subfolder names)."""
    source = _read_csv(csv_path, split) if csv_path is not None else _read_folder(images_dir)
    if not source.paths:
        where = f"{csv_path} (split={split})" if csv_path is not None else str(images_dir)
        raise UserError(f"no images to index in {where}; check the path and --split")
    return source


def image_files(directory: Path) -> list[Path]:
    """Every file under `directory` (recursively) whose extension Pillow reads, sorted."""
    if not directory.is_dir():
        raise UserError(f"image folder not found: {directory}; pass a folder of images with --images")
    extensions = set(Image.registered_extensions())
    return sorted(p for p in directory.rglob("*") if p.suffix.lower() in extensions and p.is_file())


def _read_folder(directory: Path) -> ImageSource:
    paths = image_files(directory)
    labels = [p.relative_to(directory).parts[0] if len(p.relative_to(directory).parts) > 1 else "" for p in paths]
    return ImageSource([p.resolve() for p in paths], {"path": [str(p.resolve()) for p in paths], "label": labels})


def _read_csv(csv_path: Path, split: str) -> ImageSource:
    if split not in SPLITS:
        raise UserError(f"unknown --split {split!r}; use one of: {', '.join(SPLITS)}")
    if not csv_path.is_file():
        raise UserError(f"CSV not found: {csv_path}; pass a file with columns path[,label,split,...]")
    with csv_path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = [name for name in reader.fieldnames or [] if name]
        if "path" not in fields:
            raise UserError(f"{csv_path} has no 'path' column; the header must start path,label,split")
        rows = [{key: (row.get(key) or "").strip() for key in fields} for row in reader]
    if split != "all" and "split" not in fields:
        raise UserError(f"--split {split} needs a 'split' column in {csv_path}; use --split all")
    rows = [row for row in rows if _in_split(row, split)]
    paths = [(csv_path.parent / row["path"]).resolve() for row in rows]
    columns = {"path": [str(p) for p in paths], "label": [row.get("label", "") for row in rows]}
    columns.update({name: [row[name] for row in rows] for name in fields if name not in columns})
    return ImageSource(paths, columns)


def _in_split(row: dict[str, str], split: str) -> bool:
    if split == "all":
        return True
    if split == "gallery":
        return row["split"] == "test" and row.get("is_gallery", "1").lower() in _TRUE
    return row["split"] == split
