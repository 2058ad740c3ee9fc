"""The class-balanced sampler: empirical class frequencies are uniform, epochs replay from the seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from retrieval.data.balanced_sampler import balanced_sampler

# A long tail: 400, 100, 25, 5 and 1 images.
LABELS = np.repeat([7, 3, 11, 0, 5], [400, 100, 25, 5, 1])


def draw(epochs: int, seed: int = 0) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    sampler = balanced_sampler(LABELS, generator)
    return np.concatenate([np.fromiter(sampler, dtype=np.int64) for _ in range(epochs)])


def test_every_class_is_drawn_equally_often() -> None:
    indices = draw(epochs=20)  # 20 x 531 draws
    assert len(indices) == 20 * len(LABELS)
    counts = np.array([(LABELS[indices] == label).sum() for label in (7, 3, 11, 0, 5)])
    # Under uniform class probabilities this statistic is chi-square with 4 dof; p > 0.001 by a wide margin.
    assert chisquare(counts).pvalue > 1e-3, counts
    # The random sampler's frequencies would be proportional to the class sizes instead.
    assert counts.min() > 0.8 * counts.mean()


def test_images_within_a_class_are_drawn_uniformly() -> None:
    indices = draw(epochs=20)
    head = indices[LABELS[indices] == 3]  # the 100 images of class 3, rows 400..499
    assert set(head.tolist()) <= set(range(400, 500))
    assert chisquare(np.bincount(head - 400, minlength=100)).pvalue > 1e-3


def test_the_same_generator_seed_replays_the_epoch() -> None:
    np.testing.assert_array_equal(draw(1, seed=4), draw(1, seed=4))
    assert not np.array_equal(draw(1, seed=4), draw(1, seed=5))


def test_empty_labels_raise() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        balanced_sampler(np.array([]))
