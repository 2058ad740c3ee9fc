"""Build the train, validation and test sets named by `data.name` (a registry of dataset builders)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from retrieval.config import AugmentConfig, DataConfig
from retrieval.data.csv_dataset import CsvSplit, ImageDataset, read_csv_splits
from retrieval.data.digits import DigitsDataset, load_digits_split
from retrieval.data.transforms import build_eval_transform, build_train_transform
from retrieval.data.validation import holdout_classes, holdout_images
from retrieval.errors import UserError

__all__ = ["DATASETS", "EvalSplit", "RetrievalData", "build_data"]

# (indices into the training rows, their labels, transform) -> a dataset of those rows.
_MakeSubset = Callable[[np.ndarray, np.ndarray, Callable], Dataset]


@dataclass
class EvalSplit:
    """A split scored by retrieval: its dataset (eval transform), labels and query/gallery protocol."""

    dataset: Dataset
    labels: np.ndarray  # (N,) class ids, or (N, C) bool multi-hot (an item is relevant if it shares a label)
    query_mask: np.ndarray | None = None  # (N,) bool; None: every image is a query
    gallery_mask: np.ndarray | None = None  # (N,) bool; None: every image is in the gallery


@dataclass
class RetrievalData:
    """A training set (classes 0..num_classes-1), a test set, and an optional validation set for selection."""

    train: Dataset
    train_labels: np.ndarray  # (N_train,) class indices, or (N_train, C) bool multi-hot (multi-label CSV)
    num_classes: int  # training classes, one proxy each
    test: EvalSplit
    val: EvalSplit | None = None  # None: no validation split, the run's result is its last epoch


def _digits(cfg: DataConfig, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    images, labels = load_digits_split("train", cfg.image_size)
    test_images, test_labels = load_digits_split("test", cfg.image_size)
    test = EvalSplit(DigitsDataset(test_images, test_labels, eval_tf), test_labels)

    def subset(indices: np.ndarray, subset_labels: np.ndarray, transform: Callable) -> Dataset:
        return DigitsDataset(images[indices], subset_labels, transform)

    return _with_validation(cfg, labels, subset, train_tf, eval_tf, test, val=None)


def _csv(cfg: DataConfig, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    if not cfg.path:
        raise UserError("data.name is csv but data.path is not set; use --set data.path=path/to/dataset.csv")
    splits = read_csv_splits(cfg.path)
    for required in ("train", "test"):
        if required not in splits:
            raise UserError(f"{cfg.path} has no rows with split={required}; every dataset needs train and test rows")
    train = splits["train"]

    def subset(indices: np.ndarray, subset_labels: np.ndarray, transform: Callable) -> Dataset:
        return ImageDataset([train.paths[i] for i in indices], subset_labels, transform)

    val = _eval_split(splits["val"], eval_tf) if "val" in splits else None
    return _with_validation(cfg, train.labels, subset, train_tf, eval_tf, _eval_split(splits["test"], eval_tf), val)


def _eval_split(split: CsvSplit, transform: Callable) -> EvalSplit:
    return EvalSplit(
        ImageDataset(split.paths, split.labels, transform), split.labels, split.query_mask, split.gallery_mask
    )


def _with_validation(
    cfg: DataConfig,
    labels: np.ndarray,
    subset: _MakeSubset,
    train_tf: Callable,
    eval_tf: Callable,
    test: EvalSplit,
    val: EvalSplit | None,
) -> RetrievalData:
    """The training set, less the validation images that `data.val_classes` / `data.val_fraction` hold out."""
    everything = np.arange(len(labels))
    train_idx, val_idx = everything, None
    if cfg.val_classes or cfg.val_fraction:
        if labels.ndim == 2:
            raise UserError(
                f"{cfg.path} is multi-label: data.val_classes/val_fraction cannot hold it out; "
                "add split=val rows to the CSV instead"
            )
        if val is not None:
            raise UserError(
                f"{cfg.path} has split=val rows and data.val_classes/val_fraction is set too; use one validation split"
            )
        holdout = holdout_classes if cfg.val_classes else holdout_images
        train_idx, val_idx = holdout(labels, cfg.val_classes or cfg.val_fraction)
    if labels.ndim == 2:  # multi-hot rows of a multi-label CSV: every column is a training label
        train = subset(train_idx, labels, train_tf)
        return RetrievalData(train, labels, labels.shape[1], test, val)
    # Classes renumbered 0..C-1 over what trains (holding out classes leaves gaps).
    _, train_labels = np.unique(labels[train_idx], return_inverse=True)
    if val_idx is not None:
        val = EvalSplit(subset(val_idx, labels[val_idx], eval_tf), labels[val_idx])
    train = subset(train_idx, train_labels, train_tf)
    return RetrievalData(train, train_labels, int(train_labels.max()) + 1, test, val)


# (data config, train transform, eval transform) -> the datasets.
DATASETS: dict[str, Callable[[DataConfig, Callable, Callable], RetrievalData]] = {"digits": _digits, "csv": _csv}


def build_data(
    cfg: DataConfig, model_data_config: dict[str, Any], augment: AugmentConfig, in_chans: int = 3
) -> RetrievalData:
    """Datasets for `cfg.name`, with `augment`'s transforms at `cfg.image_size`.

    Args:
        cfg: the data section.
        model_data_config: the backbone's timm preprocessing (`Embedder.data_config()`): mean, std, interpolation.
        augment: the resolved augment section.
        in_chans: the backbone's input channels: 1 gives grayscale tensors, 3 RGB.
    """
    if cfg.name not in DATASETS:
        raise UserError(f"unknown data.name {cfg.name!r}; valid names: {', '.join(DATASETS)}")
    train_tf = build_train_transform(augment, cfg.image_size, model_data_config, in_chans)
    eval_tf = build_eval_transform(augment, cfg.image_size, model_data_config, in_chans)
    return DATASETS[cfg.name](cfg, train_tf, eval_tf)
