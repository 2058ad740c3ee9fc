"""Where a re-ranker's training pairs come from, and where its blend is chosen (`reranker.pairs_from`).

`train`: pairs mined on the training split, the blend chosen on the whole validation split. The embedder
fits its training classes, so the pairs there are easy: a pair model learns the embedding's own similarity.
`validation`: the validation classes are halved at random (`train.seed`); pairs are mined on one half, the
classes the embedder never trained on, whose near misses are the kind it makes on test; the blend is chosen
on the other half. The test split is read by neither.
"""

from __future__ import annotations

import copy
from typing import Literal, NamedTuple

import numpy as np
from torch.utils.data import Dataset, Subset

from retrieval.data.datasets import EvalSplit, RetrievalData
from retrieval.errors import UserError

__all__ = ["PairSource", "pair_source"]


class PairSource(NamedTuple):
    """The mined images (eval transform, as the embedder sees them), the same through the training transform,
    their labels, the split that chooses the blend, and what the mined images are, for messages."""

    name: str
    eval_images: Dataset
    train_images: Dataset
    labels: np.ndarray
    blend: EvalSplit


PairsFrom = Literal["train", "validation"]


def pair_source(data: RetrievalData, val: EvalSplit, pairs_from: PairsFrom, seed: int) -> PairSource:
    """The images to mine and the blend's split of `data` (whose validation split is `val`), per `pairs_from`.

    Raises:
        UserError: `validation` with multi-label data or fewer than four validation classes.
    """
    if pairs_from == "train":
        return PairSource(
            "the training split", _with_transform(data.train, val.dataset), data.train, data.train_labels, val
        )
    if val.labels.ndim != 1:
        raise UserError("reranker.pairs_from=validation halves the validation classes; multi-label data has none")
    classes = np.unique(val.labels)
    if len(classes) < 4:
        raise UserError(
            f"reranker.pairs_from=validation mines half of the validation classes and chooses the blend on the other "
            f"half; this validation split has {len(classes)} class(es), it needs 4 or more (or set "
            "reranker.pairs_from=train)"
        )
    mined = np.random.default_rng(seed).permutation(classes)[: len(classes) // 2]
    inside = np.isin(val.labels, mined)
    rows, others = np.flatnonzero(inside), np.flatnonzero(~inside)
    eval_images = Subset(val.dataset, rows.tolist())
    train_images = Subset(_with_transform(val.dataset, data.train), rows.tolist())
    name = "the mined half of the validation classes"
    return PairSource(name, eval_images, train_images, val.labels[rows], _rows_of(val, others))


def _with_transform(images: Dataset, like: Dataset) -> Dataset:
    """A shallow copy of `images` that reads each image through the transform of `like`."""
    copied = copy.copy(images)
    copied.transform = like.transform  # type: ignore[attr-defined]
    return copied


def _rows_of(split: EvalSplit, rows: np.ndarray) -> EvalSplit:
    """The split restricted to `rows`, its masks and training classes with it."""

    def part(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else values[rows]

    return EvalSplit(
        Subset(split.dataset, rows.tolist()),
        split.labels[rows],
        part(split.query_mask),
        part(split.gallery_mask),
        part(split.train_class),
        split.class_names,
    )
