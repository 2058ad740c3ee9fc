"""The images an audit is about: a CSV's (or an index's) paths with their labels and splits when it has them.

Read by the one CSV reader (`read_csv_rows`, only `path` required), so a bad split or flag is
the same one-line error as in every command. Labels are kept as the CSV spells them; a CSV
without a `label` column, or with multi-label (`a|b`) rows, is audited for duplicates, leaks and
outliers only, and a CSV without a `split` column has no leak section (`missing` says why, once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.errors import UserError

if TYPE_CHECKING:
    from retrieval.index import SearchIndex

__all__ = ["Catalogue", "index_catalogue", "read_catalogue"]


@dataclass(frozen=True)
class Catalogue:
    """N images: absolute paths, and optionally each one's label and split (aligned lists)."""

    paths: list[Path]
    labels: list[str] | None = None  # None: no usable single labels (see `missing`)
    splits: list[str] | None = None  # train / val / test; None: no split column
    missing: list[str] = field(default_factory=list)  # one sentence per section left out, and why

    def __post_init__(self) -> None:
        for name, values in (("labels", self.labels), ("splits", self.splits)):
            if values is not None and len(values) != len(self.paths):
                raise ValueError(f"{name} must have one entry per path ({len(self.paths)}), got {len(values)}")

    def __len__(self) -> int:
        return len(self.paths)

    def label_codes(self) -> tuple[np.ndarray, list[str]]:
        """`(N,)` int64 class indices 0..C-1 and the C class names (sorted), for cleanlab; needs labels."""
        if self.labels is None:
            raise ValueError("this catalogue has no labels")
        names, codes = np.unique(np.asarray(self.labels, dtype=object).astype(str), return_inverse=True)
        return codes.astype(np.int64), [str(name) for name in names]

    def subset(self, rows: np.ndarray) -> Catalogue:
        """The images at `rows` (e.g. those that could be embedded), in that order."""
        taken = [int(row) for row in rows]
        return Catalogue(
            [self.paths[i] for i in taken],
            None if self.labels is None else [self.labels[i] for i in taken],
            None if self.splits is None else [self.splits[i] for i in taken],
            list(self.missing),
        )


def read_catalogue(csv_path: str | Path) -> Catalogue:
    """The images of a CSV (`path[,label,split,...]`, paths relative to its folder), resolved.

    Raises:
        UserError: the CSV is missing, malformed or has no rows.
    """
    from retrieval.data.csv_dataset import IMAGE_LIST_CSV, read_csv_rows  # torch: not for `audit --out`'s early check

    csv_path = Path(csv_path)
    columns, rows = read_csv_rows(csv_path, IMAGE_LIST_CSV)
    if not rows:
        raise UserError(f"{csv_path} has a header but no rows; list one image per row (path[,label,split])")
    paths = [(csv_path.parent / row["path"]).resolve() for row in rows]
    labels = [row["label"] for row in rows] if "label" in columns else None
    splits = [row["split"] for row in rows] if "split" in columns else None
    return _catalogue(paths, labels, splits)


def index_catalogue(index: SearchIndex, directory: Path) -> tuple[Catalogue, np.ndarray]:
    """The images of a `retrieval index build` directory and their stored vectors, without embedding again.

    The index's metadata holds the CSV's columns (`path` absolute, `label`, `split`, ...), so the
    audit reads the same catalogue the CSV gives.

    Raises:
        UserError: the index is empty, has no `path` column, or a split outside train / val / test.
    """
    ids, vectors = index.all_vectors()
    names = set(index.metadata_schema.names)
    if len(ids) < 2 or "path" not in names:
        raise UserError(
            f"{directory} holds {len(ids)} vector(s) and columns {', '.join(sorted(names))}; an audit needs an index "
            "of at least 2 images with a path column (retrieval index build --csv ...)"
        )
    rows = index.metadata_for(ids)
    paths = [Path(str(row["path"])) for row in rows]
    labels = [str(row["label"] or "") for row in rows] if "label" in names else None
    splits = [str(row["split"] or "") for row in rows] if "split" in names else None
    if splits is not None and (wrong := set(splits) - {"train", "val", "test"}):
        raise UserError(f"{directory}'s split column holds {sorted(wrong)[0]!r}; splits must be train, val or test")
    return _catalogue(paths, labels, splits), vectors


def _catalogue(paths: list[Path], labels: list[str] | None, splits: list[str] | None) -> Catalogue:
    """A catalogue with `missing` saying once which sections its columns leave out."""
    missing = []
    if labels is None:
        missing.append("no label column: no label issues or confused classes (duplicates, leaks and outliers only)")
    elif any("|" in label for label in labels) or not all(labels):
        missing.append("multi-label or empty labels: no label issues or confused classes (single labels only)")
        labels = None
    if splits is None:
        missing.append("no split column: no leak section (leaks are copies across train/val/test)")
    return Catalogue(paths, labels, splits, missing)
