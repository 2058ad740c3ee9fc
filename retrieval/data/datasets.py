"""Build the train and test sets named by `data.name` (a registry of dataset builders)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from retrieval.config import AugmentConfig, DataConfig
from retrieval.data.csv_dataset import ImageDataset, read_csv_split
from retrieval.data.digits import DigitsDataset
from retrieval.data.transforms import build_eval_transform, build_train_transform
from retrieval.errors import UserError

__all__ = ["DATASETS", "RetrievalData", "build_data"]


@dataclass
class RetrievalData:
    """A training set (classes 0..num_classes-1) and a test set with its query/gallery protocol."""

    train: Dataset
    test: Dataset
    train_labels: np.ndarray  # (N_train,)
    test_labels: np.ndarray  # (N_test,)
    num_classes: int  # training classes, one proxy each
    query_mask: np.ndarray | None = None  # (N_test,) bool; None: every test image is a query
    gallery_mask: np.ndarray | None = None  # (N_test,) bool; None: every test image is in the gallery


def _digits(cfg: DataConfig, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    train = DigitsDataset("train", cfg.image_size, train_tf)
    test = DigitsDataset("test", cfg.image_size, eval_tf)
    return RetrievalData(train, test, train.labels, test.labels, int(train.labels.max()) + 1)


def _csv(cfg: DataConfig, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    if not cfg.path:
        raise UserError("data.name is csv but data.path is not set; use --set data.path=path/to/dataset.csv")
    train_split, test_split = read_csv_split(cfg.path, "train"), read_csv_split(cfg.path, "test")
    return RetrievalData(
        train=ImageDataset(train_split.paths, train_split.labels, train_tf),
        test=ImageDataset(test_split.paths, test_split.labels, eval_tf),
        train_labels=train_split.labels,
        test_labels=test_split.labels,
        num_classes=len(train_split.class_names),
        query_mask=test_split.query_mask,
        gallery_mask=test_split.gallery_mask,
    )


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
