"""Class-bootstrap intervals and paired differences against a naive per-resample loop.

The reference draws the same class indices (the documented `default_rng(seed).integers(0, C,
size=(B, C))`) and then, one resample at a time, concatenates the drawn classes' values and
takes their mean, which is what resampling clusters means; the vectorized code must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.metrics import (
    bootstrap_interval,
    class_bootstrap,
    paired_difference,
    per_query_scores,
    retrieval_metrics,
)


def naive_class_bootstrap(values: np.ndarray, classes: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    names = sorted(set(classes.tolist()))
    by_class = [values[classes == name] for name in names]
    draws = np.random.default_rng(seed).integers(0, len(names), size=(num_resamples, len(names)), dtype=np.int32)
    return np.array([np.mean(np.concatenate([by_class[c] for c in row])) for row in draws])


def uneven_queries(seed: int = 0, num_classes: int = 23) -> tuple[np.ndarray, np.ndarray]:
    """Per-query values with class-dependent levels and class sizes from 1 to 9; string labels."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, num_classes)
    classes = np.repeat([f"c{i}" for i in range(num_classes)], sizes)
    levels = np.repeat(rng.uniform(0, 1, num_classes), sizes)
    values = (rng.uniform(0, 1, len(classes)) < levels).astype(float)
    order = rng.permutation(len(classes))
    return values[order], classes[order]


@pytest.mark.parametrize("seed", [0, 3])
def test_class_bootstrap_matches_a_naive_loop(seed: int) -> None:
    values, classes = uneven_queries(seed)
    expected = naive_class_bootstrap(values, classes, 200, seed)
    np.testing.assert_allclose(class_bootstrap(values, classes, 200, seed), expected, rtol=1e-12)


def test_interval_is_the_percentile_interval_of_the_naive_resamples() -> None:
    values, classes = uneven_queries(1)
    means = naive_class_bootstrap(values, classes, 1000, 7)
    interval = bootstrap_interval(values, classes, seed=7)
    assert interval.estimate == pytest.approx(values.mean())
    assert (interval.low, interval.high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert interval.low < interval.estimate < interval.high


def test_resampling_classes_is_wider_than_resampling_images_when_classes_differ() -> None:
    """Queries of a class share its difficulty: treating them as independent understates the spread."""
    values, classes = uneven_queries(2, num_classes=40)
    by_class = bootstrap_interval(values, classes, seed=0)
    by_image = bootstrap_interval(values, np.arange(len(values)), seed=0)
    assert by_class.high - by_class.low > 1.3 * (by_image.high - by_image.low)


def test_one_class_gives_a_zero_width_interval_and_bad_inputs_raise() -> None:
    assert bootstrap_interval(np.array([0.0, 1.0, 1.0]), np.array([5, 5, 5]))[1:] == pytest.approx((2 / 3, 2 / 3))
    with pytest.raises(UserError, match="one value and one class per query"):
        class_bootstrap(np.ones(3), np.ones(2))
    with pytest.raises(UserError, match="level"):
        bootstrap_interval(np.ones(3), np.arange(3), level=1.5)
    with pytest.raises(UserError, match="same queries"):
        paired_difference(np.ones(3), np.ones(4), np.arange(3))


def test_paired_difference_resamples_the_per_query_differences() -> None:
    values, classes = uneven_queries(4)
    other = np.roll(values, 5)
    difference = paired_difference(values, other, classes, num_resamples=300, seed=2)
    means = naive_class_bootstrap(values - other, classes, 300, 2)
    assert difference.estimate == pytest.approx(values.mean() - other.mean())
    assert (difference.low, difference.high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert paired_difference(values, values, classes)[:] == (0.0, 0.0, 0.0)


def test_per_query_scores_average_to_the_metrics_and_follow_row_order() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(8) * 3 + 1, 6)
    embeddings = rng.normal(size=(len(labels), 8)).astype(np.float32) + labels[:, None] * 0.05
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    labels[0] = 99  # a single-image class: its query has no positive and is left out
    scores = per_query_scores(embeddings, labels)
    assert scores.summary((1, 2, 4, 8)) == retrieval_metrics(embeddings, labels)
    assert scores.num_without_positive == 1 and scores.rows.tolist() == list(range(1, len(labels)))
    np.testing.assert_array_equal(scores.labels, labels[1:])
    # Row i's Recall@1 hit, by brute force: is its most similar other item of its class?
    similarities = embeddings @ embeddings.T
    np.fill_diagonal(similarities, -np.inf)
    nearest = similarities.argmax(axis=1)
    np.testing.assert_array_equal(scores.hits(1), (labels[nearest] == labels)[1:].astype(float))
