"""Confidence intervals for retrieval metrics by bootstrapping classes, not images.

The images of one class are not independent draws: they share the class's difficulty, so an
image-level bootstrap gives intervals that are too narrow. The class (cluster) bootstrap draws
C classes with replacement from the C query classes and recomputes the metric on all queries of
the drawn classes (a class drawn twice counts twice). The metric is a mean over queries, so one
resample's value is `sum of the drawn classes' per-query totals / their query counts`: per-class
totals are computed once and every resample is a matrix product, vectorized over resamples.

Paired comparisons (`paired_difference`) resample the per-query differences of two runs on the
same queries, so the variation the runs share (which classes are hard) cancels.

The interval is the percentile interval of the resampled values (Efron & Tibshirani, "An
Introduction to the Bootstrap", 1993, ch. 13); for clusters see Field & Welsh, "Bootstrapping
clustered data", JRSS B 2007.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from retrieval.errors import UserError

__all__ = ["Interval", "bootstrap_interval", "class_bootstrap", "paired_difference"]

NUM_RESAMPLES = 1000  # enough for a stable 95% percentile interval (its endpoints vary by ~0.002 at Q ~ 1,000)
LEVEL = 0.95
# Elements of the (resamples x classes) matrices handled at once: bounds memory (~100 MB) for any C.
_CHUNK_ELEMENTS = 1 << 22


class Interval(NamedTuple):
    """A point estimate with its bootstrap confidence interval."""

    estimate: float  # the metric on all queries
    low: float  # lower end of the interval
    high: float  # upper end of the interval

    def format(self) -> str:
        """`0.1234 [0.1000, 0.1500]`."""
        return f"{self.estimate:.4f} [{self.low:.4f}, {self.high:.4f}]"


def class_bootstrap(
    values: np.ndarray, classes: np.ndarray, num_resamples: int = NUM_RESAMPLES, seed: int = 0
) -> np.ndarray:
    """The mean of `values` over the queries of resampled classes, once per resample.

    Resample b draws C class indices with `numpy.random.default_rng(seed).integers(0, C,
    size=(num_resamples, C))` (row b, classes numbered in sorted label order) and averages the
    values of every query of every drawn class, repeats included.

    Args:
        values: (Q,) per-query scores, e.g. `PerQuery.hits(1)` or `PerQuery.average_precision`.
        classes: (Q,) each query's class label.
        num_resamples: B, the number of resamples.
        seed: seeds the draws; the same seed gives the same resamples for any `values` of the
            same `classes`, which is what makes `paired_difference` paired.

    Returns:
        (B,) float64 resampled means.

    Raises:
        UserError: if the arrays are empty, of different lengths, or `num_resamples` < 1.
    """
    values = np.asarray(values, dtype=np.float64)
    classes = np.asarray(classes)
    if values.ndim != 1 or values.shape != classes.shape or len(values) == 0:
        raise UserError(
            f"bootstrap needs one value and one class per query, got shapes {values.shape} and {classes.shape}"
        )
    if num_resamples < 1:
        raise UserError(f"the number of bootstrap resamples must be >= 1, got {num_resamples}")
    codes = np.unique(classes, return_inverse=True)[1].reshape(-1)
    num_classes = int(codes.max()) + 1
    totals = np.bincount(codes, weights=values, minlength=num_classes)
    counts = np.bincount(codes, minlength=num_classes).astype(np.float64)
    draws = np.random.default_rng(seed).integers(0, num_classes, size=(num_resamples, num_classes), dtype=np.int32)
    means = np.empty(num_resamples)
    step = max(1, _CHUNK_ELEMENTS // num_classes)
    for start in range(0, num_resamples, step):
        chunk = draws[start : start + step]
        means[start : start + step] = totals[chunk].sum(axis=1) / counts[chunk].sum(axis=1)
    return means


def bootstrap_interval(
    values: np.ndarray,
    classes: np.ndarray,
    level: float = LEVEL,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean of per-query `values` with its class-bootstrap percentile interval.

    Args:
        values: (Q,) per-query scores.
        classes: (Q,) each query's class label.
        level: coverage of the interval, in (0, 1).
        num_resamples: B resamples of the classes.
        seed: seeds the resamples.

    Returns:
        `Interval(mean, low, high)`; with a single class the interval has width 0 (nothing to resample).

    Raises:
        UserError: on malformed inputs or a level outside (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise UserError(f"the confidence level must lie in (0, 1), e.g. 0.95, got {level}")
    means = class_bootstrap(values, classes, num_resamples, seed)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(np.mean(values)), float(low), float(high))


def paired_difference(
    values_a: np.ndarray,
    values_b: np.ndarray,
    classes: np.ndarray,
    level: float = LEVEL,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of `values_a - values_b` over the same queries, with its class-bootstrap interval.

    Args:
        values_a: (Q,) per-query scores of run A.
        values_b: (Q,) per-query scores of run B on the same queries, in the same order.
        classes: (Q,) each query's class label.
        level: coverage of the interval, in (0, 1).
        num_resamples: B resamples of the classes.
        seed: seeds the resamples.

    Returns:
        `Interval(mean difference, low, high)`: an interval excluding 0 says A and B differ on this
        population of classes at that level.
    """
    values_a, values_b = np.asarray(values_a, dtype=np.float64), np.asarray(values_b, dtype=np.float64)
    if values_a.shape != values_b.shape:
        raise UserError(f"paired runs must score the same queries, got {values_a.shape} and {values_b.shape} values")
    return bootstrap_interval(values_a - values_b, classes, level, num_resamples, seed)
