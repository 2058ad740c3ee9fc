"""Test images that are copies of training images: the leak `retrieval evaluate` warns about, and `--exclude-leaks`.

Every evaluation of a dataset of image files compares the test files' sha256 with the train and
val files' (reading them, no model): identical files are a leak it warns about in one line. A
near-copy (re-encoded, resized, cropped) needs the embedding: `--exclude-leaks` embeds the train
and val images with the evaluation transform and flags the test images whose best cosine to any
of them is at least the leak threshold, then scores Recall@K and MAP@R without them (neither as
queries nor in the gallery). The threshold defaults to `retrieval audit`'s 0.95 rather than a stored
match threshold: that one answers "same class", which in closed-set data every test image passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from retrieval.audit.leaks import rows_with_copies
from retrieval.config import DataConfig
from retrieval.data import EvalSplit, ImageDataset, dataset_spec, read_splits
from retrieval.runtime.files import file_sha256

__all__ = ["identical_test_rows", "near_copy_test_rows", "without_rows", "warning_line"]


def identical_test_rows(config: DataConfig) -> np.ndarray | None:
    """`(N_test,)` bool: test files byte-identical to a train or val file; None for data without files (digits)."""
    if dataset_spec(config.name).read_files is None:
        return None
    splits = read_splits(config)
    earlier = {digest for name in ("train", "val") if name in splits for digest in _digests(splits[name].paths)}
    return np.array([digest in earlier for digest in _digests(splits["test"].paths)], dtype=bool)


def near_copy_test_rows(
    config: DataConfig,
    test: EvalSplit,
    test_embeddings: np.ndarray,
    embed: Callable[[Dataset], np.ndarray],
    threshold: float,
) -> np.ndarray | None:
    """`(N_test,)` bool: test rows whose best cosine to a train or val image is >= `threshold`; None without files.

    `embed` embeds a dataset as evaluation does (NaN rows for unreadable images, left out); the train and
    val images go through the test split's evaluation transform.
    """
    if dataset_spec(config.name).read_files is None or not isinstance(test.dataset, ImageDataset):
        return None
    splits = read_splits(config)
    paths = [path for name in ("train", "val") if name in splits for path in splits[name].paths]
    labels = np.zeros(len(paths), dtype=np.int64)  # unused: only the images are embedded
    earlier = embed(ImageDataset(paths, labels, test.dataset.transform, config.on_bad_image))
    earlier = earlier[np.isfinite(earlier).all(axis=1)]
    readable = np.isfinite(test_embeddings).all(axis=1)
    leaked = np.zeros(len(test_embeddings), dtype=bool)
    leaked[readable] = rows_with_copies(test_embeddings[readable], earlier, threshold)
    return leaked


def without_rows(split: EvalSplit, rows: np.ndarray) -> EvalSplit:
    """`split` scored without the `(N,)` bool `rows`: they are neither queries nor gallery items."""
    keep = ~rows
    query = keep if split.query_mask is None else split.query_mask & keep
    gallery = keep if split.gallery_mask is None else split.gallery_mask & keep
    return dataclasses.replace(split, query_mask=query, gallery_mask=gallery)


def warning_line(leaked: np.ndarray, what: str, excluded: bool) -> str:
    """`warning: 12 of 1000 test images (1.20%) are identical files to train/val images; ...` (one line)."""
    share = leaked.mean() if len(leaked) else 0.0
    if excluded:
        then = "the metrics below leave them out (--exclude-leaks)"
    else:
        then = "they inflate the metrics below; --exclude-leaks leaves them and near-copies out (audit lists them)"
    count = f"{int(leaked.sum())} of {len(leaked)} test images ({share:.2%})"
    return f"warning: {count} are {what} train/val images; {then}"


def _digests(paths: list[Path]) -> list[str]:
    """Each file's sha256; an unreadable file gets a placeholder naming it, which matches only the same file."""
    digests = []
    for number, path in enumerate(paths):
        try:
            digests.append(file_sha256(path))
        except OSError:
            digests.append(f"unreadable {number} {path}")
    return digests
