"""Validation splits carved out of the training set, so that model selection never looks at the test set."""

from __future__ import annotations

import numpy as np

from retrieval.errors import UserError

__all__ = ["SPLIT_SEED", "holdout_classes", "holdout_images"]

# The validation split is fixed, whatever train.seed is: runs over several seeds select on the same images.
SPLIT_SEED = 0


def holdout_classes(labels: np.ndarray, amount: float, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val) holding out whole classes, for zero-shot data (val classes never train).

    Args:
        labels: `(N,)` class ids of the training set.
        amount: a fraction of the classes (0 < amount < 1, rounded, at least 2) or a count (>= 2).
        seed: seed of the class draw.

    Raises:
        UserError: if fewer than 2 classes would validate or fewer than 2 would train.

    Example:
        >>> train, val = holdout_classes(np.array([0, 0, 1, 1, 2, 2, 3, 3]), 2)
        >>> len(train), len(val)
        (4, 4)
    """
    classes = np.unique(labels)
    count = round(amount * len(classes)) if amount < 1 else int(amount)
    count = max(count, 2)
    if count > len(classes) - 2:
        raise UserError(
            f"data.val_classes={amount:g} holds out {count} of {len(classes)} training classes; validation needs "
            "at least 2 classes and training at least 2 more: lower data.val_classes"
        )
    held_out = np.random.default_rng(seed).choice(classes, size=count, replace=False)
    is_val = np.isin(labels, held_out)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def holdout_images(labels: np.ndarray, fraction: float, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val) holding out `fraction` of every class's images, for closed-set data.

    Each class keeps at least one training image; classes with a single image stay in training
    only. The validation images of a class number round(fraction * n) (at least 1 when n >= 2).

    Raises:
        UserError: if no class can give a validation image.

    Example:
        >>> train, val = holdout_images(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 0.25)
        >>> len(train), len(val)
        (6, 2)
    """
    rng = np.random.default_rng(seed)
    val_parts = []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        if len(members) >= 2:
            val_parts.append(members[: min(max(round(fraction * len(members)), 1), len(members) - 1)])
    if not val_parts:
        raise UserError("data.val_fraction: no training class has 2 or more images to hold one out; set it to 0")
    val = np.sort(np.concatenate(val_parts))
    return np.setdiff1d(np.arange(len(labels)), val), val
