"""Build the train, validation and test sets of `data.name` (its files read by `retrieval.data.splits`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from torch.utils.data import Dataset

from retrieval.choices.datasets import TensorLoader, dataset_spec
from retrieval.config import AugmentConfig, DataConfig
from retrieval.data.csv_dataset import CsvSplit
from retrieval.data.digits import DigitsDataset
from retrieval.data.holdout import holdout_classes, holdout_images
from retrieval.data.image_dataset import ImageDataset
from retrieval.data.splits import training_splits
from retrieval.data.transforms import ModelDataConfig, build_eval_transform, build_train_transform
from retrieval.errors import UserError

__all__ = ["EvalSplit", "RetrievalData", "build_data"]

# (indices into the training rows, their labels, transform) -> a dataset of those rows.
_MakeSubset = Callable[[np.ndarray, np.ndarray, Callable], Dataset]


@dataclass
class EvalSplit:
    """A split scored by retrieval: its dataset (eval transform), labels and query/gallery protocol."""

    dataset: Dataset
    labels: np.ndarray  # (N,) class ids, or (N, C) bool multi-hot (an item is relevant if it shares a label)
    query_mask: np.ndarray | None = None  # (N,) bool; None: every image is a query
    gallery_mask: np.ndarray | None = None  # (N,) bool; None: every image is in the gallery
    train_class: np.ndarray | None = None  # (N,) training class (proxy) of each item, -1: class never trained
    class_names: list[str] | None = None  # the dataset's name of each class id in `labels`; None: the ids


@dataclass
class RetrievalData:
    """A training set (classes 0..num_classes-1), a test set, and an optional validation set for selection."""

    train: Dataset
    train_labels: np.ndarray  # (N_train,) class indices, or (N_train, C) bool multi-hot (multi-label CSV)
    num_classes: int  # training classes, one proxy each
    test: EvalSplit
    val: EvalSplit | None = None  # None: no validation split, the run's result is its last epoch


def _tensors(cfg: DataConfig, load: TensorLoader, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    """A dataset held in memory (digits): `load` gives each split's images and labels."""
    if cfg.exclude:
        raise UserError(f"data.exclude lists image files; data.name {cfg.name} has none: leave data.exclude unset")
    images, labels = load("train", cfg.image_size)
    test_images, test_labels = load("test", cfg.image_size)
    test = EvalSplit(DigitsDataset(test_images, test_labels, eval_tf), test_labels, train_class=test_labels)

    def subset(indices: np.ndarray, subset_labels: np.ndarray, transform: Callable) -> Dataset:
        return DigitsDataset(images[indices], subset_labels, transform)

    return _with_validation(cfg, labels, subset, train_tf, eval_tf, test, val=None)


def _image_files(cfg: DataConfig, train_tf: Callable, eval_tf: Callable) -> RetrievalData:
    """Any dataset of image files: a CSV, a class-folder tree or an official benchmark layout."""
    splits = training_splits(cfg)
    train = splits["train"]

    def subset(indices: np.ndarray, subset_labels: np.ndarray, transform: Callable) -> Dataset:
        return ImageDataset([train.paths[i] for i in indices], subset_labels, transform, cfg.on_bad_image)

    test = _eval_split(splits["test"], eval_tf, cfg.on_bad_image, train.class_names)
    val = _eval_split(splits["val"], eval_tf, cfg.on_bad_image, train.class_names) if "val" in splits else None
    return _with_validation(cfg, train.labels, subset, train_tf, eval_tf, test, val)


def _eval_split(split: CsvSplit, transform: Callable, on_bad_image: str, train_names: list[str]) -> EvalSplit:
    """An evaluation split; `train_class` in the training split's numbering (renumbered later).

    Multi-label rows have no single training class: their `train_class` is None (no per-group results).
    """
    index = {name: i for i, name in enumerate(train_names)}
    train_class = None
    if split.labels.ndim == 1:
        train_class = np.array([index.get(split.class_names[code], -1) for code in split.labels], dtype=np.int64)
    return EvalSplit(
        ImageDataset(split.paths, split.labels, transform, on_bad_image),
        split.labels,
        split.query_mask,
        split.gallery_mask,
        train_class,
        split.class_names,
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
                f"{cfg.path or cfg.root} has its own validation split (split=val rows, or a val/ folder) and "
                "data.val_classes/val_fraction is set too; use one validation split"
            )
        if cfg.val_classes:
            train_idx, val_idx = holdout_classes(labels, cfg.val_classes)
        else:
            train_idx, val_idx = holdout_images(labels, cfg.val_fraction or 0.0)
    if labels.ndim == 2:  # multi-hot rows of a multi-label CSV: every column is a training label
        train = subset(train_idx, labels, train_tf)
        return RetrievalData(train, labels, labels.shape[1], test, val)
    # Classes renumbered 0..C-1 over what trains (holding out classes leaves gaps).
    trained, train_labels = np.unique(labels[train_idx], return_inverse=True)
    if val_idx is not None:
        val = EvalSplit(subset(val_idx, labels[val_idx], eval_tf), labels[val_idx], train_class=labels[val_idx])
    for split in (test, val):
        if split is not None and split.train_class is not None:
            split.train_class = _renumbered(split.train_class, trained)
    train = subset(train_idx, train_labels, train_tf)
    return RetrievalData(train, train_labels, int(train_labels.max()) + 1, test, val)


def _renumbered(codes: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """Class codes of the training split -> their index among the `trained` (sorted) codes, -1 if absent."""
    position = np.minimum(np.searchsorted(trained, codes), len(trained) - 1)
    return np.where((codes >= 0) & (trained[position] == codes), position, -1)


def build_data(
    cfg: DataConfig, model_data_config: ModelDataConfig, augment: AugmentConfig, in_chans: int = 3
) -> RetrievalData:
    """Datasets for `cfg.name`, with `augment`'s transforms at `cfg.image_size`.

    Args:
        cfg: the data section.
        model_data_config: the backbone's timm preprocessing (`Embedder.data_config()`): mean, std, interpolation.
        augment: the resolved augment section.
        in_chans: the backbone's input channels: 1 gives grayscale tensors, 3 RGB.

    Raises:
        UserError: `cfg.name` is not registered (the message lists the valid names), or its data cannot be read.
    """
    spec = dataset_spec(cfg.name)
    train_tf = build_train_transform(augment, cfg.image_size, model_data_config, in_chans)
    eval_tf = build_eval_transform(augment, cfg.image_size, model_data_config, in_chans)
    load_tensors = spec.tensor_loader()
    if load_tensors is not None:
        return _tensors(cfg, load_tensors, train_tf, eval_tf)
    return _image_files(cfg, train_tf, eval_tf)
