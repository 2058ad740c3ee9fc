"""Make a long-tailed training set from a dataset CSV: an exponential profile of class sizes.

The usual construction of CIFAR-LT / ImageNet-LT style benchmarks (Cui et al., CVPR 2019; Cao et
al., "LDAM", NeurIPS 2019): with the training classes ranked c = 0..C-1, class c keeps

    n_c = floor(n_max * ratio^(-c / (C - 1)))

images, so the head keeps n_max (the largest class's count) and the tail n_max / ratio. Only
`split=train` rows are subsampled; validation and test rows are copied untouched, so results stay
comparable with the balanced set's.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.data.csv_dataset import read_csv_rows
from retrieval.errors import UserError
from retrieval.runtime.files import write_text

__all__ = ["LongTailSummary", "longtail_counts", "make_longtail_csv"]


@dataclass(frozen=True)
class LongTailSummary:
    """What `make_longtail_csv` kept."""

    classes: int  # training classes
    head: int  # images kept in the largest class
    tail: int  # images kept in the smallest class
    train_before: int  # training rows read
    train_after: int  # training rows written
    capped: int  # classes that had fewer images than their profile asked for (all of them kept)

    def describe(self) -> str:
        capped = f"; {self.capped} classes had fewer images than the profile and keep all" if self.capped else ""
        return (
            f"{self.classes} training classes, {self.head} -> {self.tail} images per class, "
            f"{self.train_after} of {self.train_before} training rows kept{capped}; val/test rows untouched"
        )


def longtail_counts(num_classes: int, n_max: int, ratio: float) -> np.ndarray:
    """The profile `n_c = floor(n_max * ratio^(-c / (C - 1)))` for c = 0..C-1 (one class: n_max).

    Raises:
        UserError: if ratio < 1 (or not finite), or the tail classes would get 0 images.
    """
    if not (math.isfinite(ratio) and ratio >= 1.0):
        raise UserError(f"--imbalance must be a ratio >= 1 (head size / tail size, e.g. 100), got {ratio}")
    exponents = np.arange(num_classes) / max(1, num_classes - 1)
    counts = np.floor(n_max * ratio**-exponents + 1e-9).astype(np.int64)
    if counts.min() < 1:
        raise UserError(
            f"--imbalance {ratio:g} gives the rarest classes 0 images (largest class: {n_max} images, "
            f"{n_max} / {ratio:g} < 1); use --imbalance {n_max} or less"
        )
    return counts


def make_longtail_csv(source: Path, destination: Path, ratio: float, seed: int = 0) -> LongTailSummary:
    """Write a copy of dataset CSV `source` whose training classes follow the long-tail profile.

    Classes are ranked by decreasing training count, ties in an order drawn from `seed`; within a
    class the kept images are drawn from `seed` too, so the output depends only on (source, ratio,
    seed). Image paths are rewritten relative to the destination's folder when it differs.

    Args:
        source: a dataset CSV (`path,label,split[,...]`).
        destination: the CSV to write (atomically); its folder must exist.
        ratio: imbalance, largest / smallest class size, >= 1.
        seed: seeds the class ranking among equal counts and the images kept.

    Returns:
        What was kept.

    Raises:
        UserError: a missing or malformed CSV, no training rows, or a bad ratio (see `longtail_counts`).
    """
    fieldnames, rows = read_csv_rows(source)  # strict: encoding, columns and every value checked
    train = [i for i, row in enumerate(rows) if row["split"] == "train"]
    if not train:
        raise UserError(f"{source} has no split=train rows to make long-tailed")
    labels = np.array([rows[i]["label"] for i in train])
    names, codes, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(names))
    ranking = shuffled[np.argsort(-sizes[shuffled], kind="stable")]  # largest first, ties in seeded order
    targets = longtail_counts(len(names), int(sizes.max()), ratio)
    keep = np.zeros(len(rows), dtype=bool)
    keep[[i for i, row in enumerate(rows) if row["split"] != "train"]] = True
    train_rows = np.array(train)
    for rank, code in enumerate(ranking):
        members = train_rows[codes.reshape(-1) == code]
        kept = min(int(targets[rank]), len(members))
        keep[rng.choice(members, size=kept, replace=False)] = True
    out_rows = [_relocated(row, source, destination) for row, kept in zip(rows, keep, strict=True) if kept]
    _write(destination, fieldnames, out_rows)
    kept_sizes = np.minimum(targets, sizes[ranking])
    return LongTailSummary(
        classes=len(names),
        head=int(kept_sizes.max()),
        tail=int(kept_sizes.min()),
        train_before=len(train),
        train_after=int(kept_sizes.sum()),
        capped=int((sizes[ranking] < targets).sum()),
    )


def _relocated(row: dict[str, str], source: Path, destination: Path) -> dict[str, str]:
    """The row with its image path relative to the destination CSV's folder."""
    source_dir, destination_dir = source.resolve().parent, destination.resolve().parent
    if source_dir == destination_dir or os.path.isabs(row["path"]):
        return row
    return {**row, "path": os.path.relpath(source_dir / row["path"], destination_dir)}


def _write(path: Path, fieldnames: list[str], rows: list[dict[str, str]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    if not path.resolve().parent.is_dir():
        raise UserError(f"the folder of {path} does not exist; create it first")
    write_text(path, buffer.getvalue())
