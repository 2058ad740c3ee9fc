"""Validation holdouts: disjoint from training, deterministic, whole classes or a share of every class."""

import numpy as np
import pytest

from retrieval.config import load_config
from retrieval.data import build_data, holdout_classes, holdout_images
from retrieval.errors import UserError

LABELS = np.repeat(np.arange(10), [2, 3, 4, 5, 6, 7, 8, 9, 10, 11])


@pytest.mark.parametrize("amount", [0.3, 3])
def test_class_holdout_keeps_whole_classes_apart(amount):
    train, val = holdout_classes(LABELS, amount)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(LABELS)
    assert len(np.unique(LABELS[val])) == 3
    assert not set(LABELS[train]) & set(LABELS[val])
    np.testing.assert_array_equal(holdout_classes(LABELS, amount)[1], val)  # the same split every time


def test_class_holdout_needs_two_classes_each_side():
    with pytest.raises(UserError, match="validation needs at least 2 classes and training at least 2 more"):
        holdout_classes(LABELS, 9)


def test_image_holdout_takes_a_share_of_every_class_and_leaves_one_to_train():
    train, val = holdout_images(LABELS, 0.2)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(LABELS)
    for cls, count in zip(*np.unique(LABELS, return_counts=True), strict=True):
        held = int((LABELS[val] == cls).sum())
        assert held == min(max(round(0.2 * count), 1), count - 1)
    assert set(LABELS[train]) == set(LABELS)


def test_digits_validation_split_is_carved_from_training_only():
    config = load_config(None, ["data.val_fraction=0", "data.val_classes=3"])
    data = build_data(config.data, {"mean": (0.5,) * 3, "std": (0.5,) * 3}, config.augment)
    assert data.num_classes == 7 and set(np.unique(data.train_labels)) == set(range(7))
    assert len(np.unique(data.val.labels)) == 3 and len(data.train) + len(data.val.dataset) == 898
    assert len(data.test.dataset) == 899
