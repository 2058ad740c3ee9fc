"""The generic CSV format (docs/datasets.md), `path,label,split[,is_query,is_gallery]`, and reading image files.

Paths are relative to the CSV file's folder. `label` is any class id (int or string); each
split's classes are numbered 0..C-1 in sorted order (numeric ids numerically). A row may carry
several labels joined by `|` (`cat|indoor`): a CSV with any such row is multi-label, and every
split's labels are then `(N, C)` multi-hot rows. Test rows without
`is_query`/`is_gallery` all query all other test rows (CUB/Cars/SOP protocol); with them,
queries search the gallery rows only (In-Shop protocol).

`read_csv_rows` is the one CSV reader of every command: training and evaluation read a dataset
CSV (`DATASET_CSV`), `index build|add` and `embed` a list of images (`IMAGE_LIST_CSV`, where
only `path` is required). Both check every value they hold the same way: a `split` other than
train/val/test, a query/gallery flag other than 0/1, true/false or yes/no (empty: false), or an
empty label in a `|`-joined list is a one-line error naming the file, the line and the value.
Files are read as UTF-8 with an optional byte-order mark (`utf-8-sig`: Excel's "CSV UTF-8" starts
with one, which would otherwise hide the first column's name); a file in another encoding
(Latin-1, UTF-16) is a one-line error naming the file, line and byte offset, and asking for
UTF-8, rather than a guess that would silently change non-ASCII paths and labels. The format's own
columns (label, split, the flags) are read without surrounding spaces, a path without those at its start
(whitespace at its end may be part of a file name); every other cell is metadata and kept exactly as
written (` 1` stays ` 1`, a string: a value is what the user wrote).

Torch-free; the training dataset over these rows is `retrieval.data.image_dataset.ImageDataset`.
"""

from __future__ import annotations

import codecs
import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from retrieval.choices.splits import SPLIT_NAMES
from retrieval.errors import UserError

__all__ = [
    "DATASET_CSV",
    "IMAGE_LIST_CSV",
    "CsvFormat",
    "CsvRows",
    "CsvSplit",
    "flag_is_set",
    "labeled_split",
    "read_csv_rows",
    "read_csv_split",
    "read_csv_splits",
]

_FLAGS = ("is_query", "is_gallery")
_SPLIT_CHOICES = f"{', '.join(SPLIT_NAMES[:-1])} or {SPLIT_NAMES[-1]}"  # "train, val or test"
# The values of an is_query / is_gallery cell (compared lower-case); anything else is an error.
_FLAG_TRUE, _FLAG_FALSE = frozenset({"1", "true", "yes"}), frozenset({"0", "false", "no", ""})
_CSV_PATHS_HINT = "paths are relative to the CSV's folder"
_MULTI = "|"  # joins the labels of a multi-label row
_STRIPPED = ("label", "split", *_FLAGS)  # the format's columns; metadata cells are kept as written


@dataclass(frozen=True)
class CsvFormat:
    """What a command needs of a CSV: the columns it requires, and the words its errors use."""

    name: str  # what errors call the file, e.g. "dataset CSV"
    required: tuple[str, ...]  # columns every file must have
    header: str  # the header errors suggest
    fix_missing_file: str  # how to fix a path that is not a file


DATASET_CSV = CsvFormat(
    "dataset CSV",
    ("path", "label", "split"),
    "path,label,split[,is_query,is_gallery]",
    "set data.path to a CSV with columns path,label,split",
)
IMAGE_LIST_CSV = CsvFormat(
    "CSV", ("path",), "path[,label,split,is_query,is_gallery,...]", "pass a file with columns path[,label,split,...]"
)


class CsvRows(NamedTuple):
    """A CSV read by `read_csv_rows`: its column names and its rows, every cell a stripped string."""

    columns: list[str]
    rows: list[dict[str, str]]  # one dict per data row, keyed by every column (a missing cell is "")


@dataclass(frozen=True)
class CsvSplit:
    """The rows of one split: absolute image paths, class indices and optional query/gallery masks."""

    paths: list[Path]
    labels: np.ndarray  # (N,) int64 class indices 0..C-1, or (N, C) bool multi-hot for a multi-label CSV
    class_names: list[str]  # class_names[c] is the CSV label of index c
    query_mask: np.ndarray | None  # (N,) bool, None when the CSV has no is_query column
    gallery_mask: np.ndarray | None


def read_csv_rows(csv_path: str | Path, csv_format: CsvFormat = DATASET_CSV) -> CsvRows:
    """Read a CSV and check every value of the format's columns (see the module docstring).

    Columns with an empty name (a trailing comma in the header) are dropped; other unknown
    columns are kept as they are (an index keeps them as metadata).

    Raises:
        UserError: the file is missing, is not UTF-8 text or not well-formed CSV, lacks a required
            column, or a `split`, flag or label value is not one the format allows (the message
            names the file and line).
    """
    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise UserError(f"{csv_format.name} not found: {csv_path}; {csv_format.fix_missing_file}")
    reader = csv.DictReader(io.StringIO(_csv_text(csv_path), newline=""))
    try:
        return _read_rows(csv_path, reader, csv_format)
    except csv.Error as exc:
        raise UserError(
            f"{csv_path}:{reader.line_num}: not a well-formed CSV ({exc}); check that line's quotes"
        ) from exc


def _csv_text(csv_path: Path) -> str:
    """The file's text as UTF-8, without a leading byte-order mark; any other encoding is refused in one line."""
    data = csv_path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # exc.object is the data after a byte-order mark, and exc.start an offset into it.
        offset = exc.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        line = exc.object[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{csv_path}:{line}: not UTF-8 text (byte 0x{data[offset]:02x} at byte offset {offset}); "
            "re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`, or Excel's CSV UTF-8)"
        ) from exc


def _read_rows(csv_path: Path, reader: csv.DictReader, csv_format: CsvFormat) -> CsvRows:
    """The header and checked rows of an open CSV reader (`read_csv_rows`)."""
    columns = [name for name in reader.fieldnames or [] if name]
    missing = [name for name in csv_format.required if name not in columns]
    if missing:
        raise UserError(f"{csv_path} lacks column(s) {', '.join(missing)}; the header must be {csv_format.header}")
    rows = []
    for row in reader:
        cells = {name: _cell(name, row.get(name) or "") for name in columns}
        _check_row(csv_path, reader.line_num, cells)
        rows.append(cells)
    return CsvRows(columns, rows)


def _cell(column: str, text: str) -> str:
    """A cell as read: metadata as written; the format's columns without the spaces around them, but a path keeps
    its end: a file name may end in whitespace (a space, a line break), and cutting it would name another file."""
    if column == "path":
        return text.lstrip()
    return text.strip() if column in _STRIPPED else text


def flag_is_set(cell: str) -> bool:
    """Whether an `is_query` / `is_gallery` cell that `read_csv_rows` accepted says yes."""
    return cell.lower() in _FLAG_TRUE


def _check_row(csv_path: Path, line: int, row: dict[str, str]) -> None:
    """Refuse a row whose split, flags or labels are not values of the format."""
    if "split" in row and row["split"] not in SPLIT_NAMES:
        raise UserError(f"{csv_path}:{line}: split must be {_SPLIT_CHOICES}, got {row['split']!r}")
    for flag in _FLAGS:
        if flag in row and row[flag].lower() not in _FLAG_TRUE | _FLAG_FALSE:
            raise UserError(f"{csv_path}:{line}: {flag} must be 0/1, true/false or yes/no, got {row[flag]!r}")
    label = row.get("label", "")
    if _MULTI in label and not all(name.strip() for name in label.split(_MULTI)):
        raise UserError(f"{csv_path}:{line}: empty label in {label!r}; give each row one or more labels")


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
    columns, rows = read_csv_rows(csv_path, DATASET_CSV)
    flags = [flag for flag in _FLAGS if flag in columns]
    if len(flags) == 1:
        missing_flag = next(flag for flag in _FLAGS if flag not in flags)
        raise UserError(
            f"{csv_path} has column {flags[0]} but not {missing_flag}; give both (In-Shop style query/gallery) "
            "or neither (every test image queries all others)"
        )
    if not rows:
        raise UserError(f"{csv_path} has a header but no rows")
    multi_label = any(_MULTI in row["label"] for row in rows)
    splits = {}
    for split in SPLIT_NAMES:
        chosen = [row for row in rows if row["split"] == split]
        if chosen:
            splits[split] = _split_of(csv_path, chosen, bool(flags), multi_label, check_images)
    return splits


def _split_of(
    csv_path: Path, chosen: list[dict[str, str]], has_flags: bool, multi_label: bool, check_images: bool
) -> CsvSplit:
    paths = [csv_path.parent / row["path"] for row in chosen]
    query_mask, gallery_mask = (_flag_mask(chosen, flag) if has_flags else None for flag in _FLAGS)
    if multi_label:
        if check_images:
            _check_images_exist(csv_path, paths, _CSV_PATHS_HINT)
        labels, class_names = _multi_hot([row["label"] for row in chosen])
        return CsvSplit(paths, labels, class_names, query_mask, gallery_mask)
    names = [row["label"] for row in chosen]
    return labeled_split(
        paths, names, csv_path, query_mask, gallery_mask, check_images=check_images, hint=_CSV_PATHS_HINT
    )


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


def _flag_mask(rows: list[dict[str, str]], flag: str) -> np.ndarray:
    return np.array([flag_is_set(row[flag]) for row in rows], dtype=bool)


def _class_sort_key(name: str) -> tuple[int, int, str]:
    """Numeric ids sort numerically ("2" < "10"), before any string ids."""
    return (0, int(name), "") if name.lstrip("-").isdigit() else (1, 0, name)
