"""The generic CSV dataset format of design.md: `path,label,split[,is_query,is_gallery]`.

Paths are relative to the CSV file's folder. `label` is any class id (int or string); each
split's classes are numbered 0..C-1 in sorted order (numeric ids numerically). A row may carry
several labels joined by `|` (`cat|indoor`): a CSV with any such row is multi-label, and every
split's labels are then `(N, C)` multi-hot rows. Test rows without
`is_query`/`is_gallery` all query all other test rows (CUB/Cars/SOP protocol); with them,
queries search the gallery rows only (In-Shop protocol).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset, get_worker_info

from retrieval.data.loader import BadImage, BadImageLog
from retrieval.errors import UserError

__all__ = [
    "CsvSplit",
    "ImageDataset",
    "flatten_image",
    "labeled_split",
    "load_image",
    "read_csv_split",
    "read_csv_splits",
]

_REQUIRED = ("path", "label", "split")
_FLAGS = ("is_query", "is_gallery")
_SPLITS = ("train", "val", "test")
_TRUE, _FALSE = {"1", "true", "yes"}, {"0", "false", "no", ""}
_CSV_PATHS_HINT = "paths are relative to the CSV's folder"
_MULTI = "|"  # joins the labels of a multi-label row


@dataclass(frozen=True)
class CsvSplit:
    """The rows of one split: absolute image paths, class indices and optional query/gallery masks."""

    paths: list[Path]
    labels: np.ndarray  # (N,) int64 class indices 0..C-1, or (N, C) bool multi-hot for a multi-label CSV
    class_names: list[str]  # class_names[c] is the CSV label of index c
    query_mask: np.ndarray | None  # (N,) bool, None when the CSV has no is_query column
    gallery_mask: np.ndarray | None


def read_csv_split(csv_path: str | Path, split: str) -> CsvSplit:
    """Read the rows of `split` (`train`, `val` or `test`) from a dataset CSV, checking every image exists."""
    splits = read_csv_splits(csv_path)
    if split not in splits:
        raise UserError(f"{csv_path} has no rows with split={split}; every dataset needs train and test rows")
    return splits[split]


def read_csv_splits(csv_path: str | Path, check_images: bool = True) -> dict[str, CsvSplit]:
    """Every split present in a dataset CSV (`train`, `val`, `test`), reading the file once.

    `check_images=False` skips the check that every listed image exists (`data.on_bad_image: skip`).
    """
    csv_path = Path(csv_path)
    rows = _read_rows(csv_path)
    has_flags = _FLAGS[0] in rows[0]  # _read_rows checked that both flags or neither are columns
    multi_label = any(_MULTI in row["label"] for row in rows)
    splits = {}
    for split in _SPLITS:
        chosen = [row for row in rows if row["split"] == split]
        if chosen:
            splits[split] = _split_of(csv_path, chosen, has_flags, multi_label, check_images)
    return splits


def _split_of(
    csv_path: Path, chosen: list[dict[str, str]], has_flags: bool, multi_label: bool, check_images: bool
) -> CsvSplit:
    paths = [csv_path.parent / row["path"] for row in chosen]
    masks = [_flag_mask(csv_path, chosen, flag) if has_flags else None for flag in _FLAGS]
    if multi_label:
        if check_images:
            _check_images_exist(csv_path, paths, _CSV_PATHS_HINT)
        return CsvSplit(paths, *_multi_hot([row["label"] for row in chosen]), *masks)
    names = [row["label"] for row in chosen]
    return labeled_split(paths, names, csv_path, *masks, check_images=check_images, hint=_CSV_PATHS_HINT)


def labeled_split(
    paths: list[Path],
    names: list[str],
    source: Path,
    query_mask: np.ndarray | None = None,
    gallery_mask: np.ndarray | None = None,
    check_images: bool = True,
    hint: str = "is data.root the extracted dataset folder?",
) -> CsvSplit:
    """A split of image files and class names, classes numbered 0..C-1 in sorted order (numeric ids numerically).

    Args:
        paths: image files.
        names: the class id of each file (any string).
        source: the file that lists them, named in errors.
        query_mask, gallery_mask: `(N,)` bool In-Shop-style protocol, or None (every image queries the others).
        check_images: raise if a listed image does not exist (off with `data.on_bad_image: skip`).
        hint: how to fix missing images, appended to the error.

    Raises:
        UserError: if `check_images` and some listed images do not exist (the first is named).
    """
    if check_images:
        _check_images_exist(source, paths, hint)
    class_names = sorted(set(names), key=_class_sort_key)
    index = {name: i for i, name in enumerate(class_names)}
    labels = np.array([index[name] for name in names], dtype=np.int64)
    return CsvSplit(paths, labels, class_names, query_mask, gallery_mask)


def _check_images_exist(source: Path, paths: list[Path], hint: str) -> None:
    missing = [path for path in paths if not path.is_file()]
    if missing:
        raise UserError(
            f"{len(missing)} image(s) listed in {source} do not exist, first: {missing[0]}; {hint} "
            "(data.on_bad_image=skip leaves missing images out)"
        )


def _multi_hot(cells: list[str]) -> tuple[np.ndarray, list[str]]:
    """`(N, C)` bool multi-hot rows and the C label names of `|`-joined label cells."""
    per_row = [{name.strip() for name in cell.split(_MULTI)} for cell in cells]
    class_names = sorted(set().union(*per_row), key=_class_sort_key)
    index = {name: i for i, name in enumerate(class_names)}
    labels = np.zeros((len(cells), len(class_names)), dtype=bool)
    for row, names in enumerate(per_row):
        labels[row, [index[name] for name in names]] = True
    return labels, class_names


def _read_rows(csv_path: Path) -> list[dict[str, str]]:
    if not csv_path.is_file():
        raise UserError(f"dataset CSV not found: {csv_path}; set data.path to a CSV with columns path,label,split")
    with csv_path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [col for col in _REQUIRED if col not in (reader.fieldnames or [])]
        if missing:
            raise UserError(
                f"{csv_path} lacks column(s) {', '.join(missing)}; "
                "the header must be path,label,split[,is_query,is_gallery]"
            )
        flags = [flag for flag in _FLAGS if flag in (reader.fieldnames or [])]
        if len(flags) == 1:
            missing_flag = next(flag for flag in _FLAGS if flag not in flags)
            raise UserError(
                f"{csv_path} has column {flags[0]} but not {missing_flag}; give both (In-Shop style query/gallery) "
                "or neither (every test image queries all others)"
            )
        rows = [{key: (value or "").strip() for key, value in row.items() if key is not None} for row in reader]
    if not rows:
        raise UserError(f"{csv_path} has a header but no rows")
    for line, row in enumerate(rows, start=2):
        if row["split"] not in _SPLITS:
            raise UserError(f"{csv_path}:{line}: split must be train, val or test, got {row['split']!r}")
        if _MULTI in row["label"] and not all(name.strip() for name in row["label"].split(_MULTI)):
            raise UserError(f"{csv_path}:{line}: empty label in {row['label']!r}; give each row one or more labels")
    return rows


def _flag_mask(csv_path: Path, rows: list[dict[str, str]], flag: str) -> np.ndarray:
    values = [row.get(flag, "").lower() for row in rows]
    bad = next((v for v in values if v not in _TRUE | _FALSE), None)
    if bad is not None:
        raise UserError(f"{csv_path}: column {flag} must be 0/1 or true/false, got {bad!r}")
    return np.array([v in _TRUE for v in values], dtype=bool)


def _class_sort_key(name: str) -> tuple[int, int, str]:
    """Numeric ids sort numerically ("2" < "10"), before any string ids."""
    return (0, int(name), "") if name.lstrip("-").isdigit() else (1, 0, name)


# Modes that `load_image` keeps grayscale; every other mode becomes RGB.
_GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "F")
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B")
# What Pillow raises for a missing file, a file that is not an image, a truncated one, or a decompression bomb.
_IMAGE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def load_image(path: str | Path, mode: str | None = None) -> Image.Image:
    """Read an image file as `RGB` or `L`, with transparent pixels composited onto white (`flatten_image`).

    Raises:
        UserError: if the file cannot be read as an image.
    """
    try:
        with Image.open(path) as image:
            return flatten_image(image, mode)
    except _IMAGE_ERRORS as exc:
        reason = f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else exc.__class__.__name__
        raise UserError(f"cannot read image {path}: {reason}; replace or remove the file") from exc


def flatten_image(image: Image.Image, mode: str | None = None) -> Image.Image:
    """An opened image as `RGB` or `L`, with transparent pixels composited onto white.

    A black stroke on a transparent background (RGBA, LA, or a palette / grayscale / RGB PNG with a
    transparent colour) stays a black stroke on white; a plain conversion would drop the alpha and
    leave the stroke on black. 16-bit grayscale is scaled to 8 bits (Pillow would clip it).

    Args:
        image: a decoded (or lazily opened) Pillow image.
        mode: `RGB` or `L`; None keeps grayscale images `L` and makes all others `RGB` (the
            transforms then convert to the channels the model takes).
    """
    target = mode or ("L" if image.mode in _GRAY_MODES else "RGB")
    if image.mode in _SIXTEEN_BIT:
        image = image.point(lambda value: value / 257)
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    return image.convert(target)


class ImageDataset(Dataset):
    """Images read from files with `load_image` (RGB or grayscale, transparency on white); items are `(image, label)`.

    An unreadable image raises `UserError` in the main process; in a DataLoader worker (or with
    `on_bad_image="skip"`) the item is a `BadImage` instead, which `ImageLoader` raises as one line
    in the main process or leaves out (see `retrieval.data.loader`).

    Args:
        paths: image files.
        labels: `(N,)` class indices, or `(N, C)` bool multi-hot rows (an item's label is then a
            `(C,)` bool tensor, batched to `(B, C)`).
        transform: applied to each PIL image (`retrieval.data.transforms`; it converts to the model's channels).
        on_bad_image: `fail` or `skip` (`data.on_bad_image`).
    """

    def __init__(
        self,
        paths: list[Path],
        labels: np.ndarray,
        transform: Callable[[Image.Image], Tensor],
        on_bad_image: str = "fail",
    ) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"{len(paths)} paths but {len(labels)} labels")
        self.paths = paths
        self.labels = labels
        self.transform = transform
        self.bad_images = BadImageLog(on_bad_image)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, int | Tensor] | BadImage:
        try:
            image = load_image(self.paths[index])
        except UserError as exc:
            bad = BadImage(index, str(exc), str(self.paths[index]))
            if self.bad_images.policy == "fail" and get_worker_info() is None:
                self.bad_images.handle(bad)  # raises; a worker hands `bad` to ImageLoader instead
            return bad
        label = self.labels[index]
        return self.transform(image), torch.from_numpy(label) if label.ndim else int(label)
