"""The proxy classifier's report against scikit-learn and loops."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import auc, precision_recall_curve

from retrieval.metrics.calibration import temperature_softmax
from retrieval.metrics.classification import classification_report


def _case(k: int = 4, n: int = 120):
    rng = np.random.default_rng(0)
    targets = rng.integers(0, k - 1, size=n)  # the last class never occurs: an absent class
    logits = rng.normal(size=(n, k)) + 2.0 * np.eye(k)[targets]
    return temperature_softmax(logits), targets


def test_confusion_matrix_and_accuracy_equal_loops():
    probabilities, targets = _case()
    report = classification_report(probabilities, targets)
    predictions = probabilities.argmax(1)
    counts = np.zeros((4, 4), int)
    for y, p in zip(targets, predictions, strict=True):
        counts[y, p] += 1
    assert report.confusion == counts.tolist()
    for row, normalized in zip(counts, report.confusion_normalized, strict=True):
        expected = row / row.sum() if row.sum() else np.zeros(4)
        np.testing.assert_allclose(normalized, expected)
    assert report.accuracy == pytest.approx(np.trace(counts) / len(targets))
    assert report.average_precision[3] is None and report.pr_curves[3] is None


def test_pr_curves_are_interpolated_one_vs_rest_curves():
    probabilities, targets = _case()
    report = classification_report(probabilities, targets)
    for k in range(3):
        precision, recall, _ = precision_recall_curve(targets == k, probabilities[:, k])
        curve = report.pr_curves[k]
        assert np.all(np.diff(curve.precision) <= 1e-12)  # interpolated precision never rises with recall
        for level, value in zip(curve.recall, curve.precision, strict=True):  # max precision at recall >= level
            assert value == pytest.approx(precision[recall >= level - 1e-12].max())
        assert auc(curve.recall, curve.precision) == pytest.approx(report.average_precision[k], abs=0.05)
