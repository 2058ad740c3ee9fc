"""Rows to leave out of a dataset or an index: the image paths listed in a CSV such as an audit report's.

`retrieval audit` writes one row per image with a `path` column (absolute paths), so any of its
CSVs is an exclusion list: `train --set data.exclude=report/label_issues.csv` trains without the
flagged rows, and `index build --exclude report/near_duplicates.csv` indexes one image of each
duplicate group. A CSV with a `keep` column (the duplicate reports) excludes only its rows whose
`keep` is 0: each group keeps its first member. Relative paths are resolved against the
exclusion CSV's folder. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.data.csv_dataset import IMAGE_LIST_CSV, CsvSplit, labeled_split, read_csv_rows
from retrieval.errors import UserError

__all__ = ["excluded_paths", "without_excluded"]


def excluded_paths(csv_path: str | Path) -> frozenset[Path]:
    """The resolved image paths a CSV excludes: every `path`, or those whose `keep` cell is 0 when it has `keep`.

    Raises:
        UserError: the file is missing, has no `path` column, or a `keep` cell is not 0 or 1.
    """
    csv_path = Path(csv_path)
    columns, rows = read_csv_rows(csv_path, IMAGE_LIST_CSV)
    excluded = set()
    for line, row in enumerate(rows, start=2):
        keep = row.get("keep", "0") if "keep" in columns else "0"
        if keep not in ("0", "1"):
            raise UserError(f"{csv_path}:{line}: keep must be 0 or 1, got {keep!r}")
        if keep == "0":
            excluded.add((csv_path.parent / row["path"]).resolve())
    return frozenset(excluded)


def without_excluded(split: CsvSplit, excluded: frozenset[Path], source: Path) -> CsvSplit:
    """`split` without the rows whose resolved path is in `excluded`; classes renumbered over what is left.

    A class whose every image is excluded disappears, so training never sees a proxy without images.
    """
    keep = np.array([path.resolve() not in excluded for path in split.paths], dtype=bool)
    if keep.all():
        return split
    paths = [path for path, kept in zip(split.paths, keep, strict=True) if kept]
    query_mask, gallery_mask = (None if mask is None else mask[keep] for mask in (split.query_mask, split.gallery_mask))
    if split.labels.ndim == 2:  # multi-hot: drop the rows, keep the label columns that still have an image
        labels = split.labels[keep]
        present = labels.any(axis=0)
        names = [name for name, used in zip(split.class_names, present, strict=True) if used]
        return CsvSplit(paths, labels[:, present], names, query_mask, gallery_mask)
    names = [split.class_names[label] for label in split.labels[keep]]
    return labeled_split(paths, names, source, query_mask, gallery_mask, check_images=False)
