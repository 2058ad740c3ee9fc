"""The proxy classifier's pictures: every figure written as a whole PNG, nothing else left in the folder."""

from __future__ import annotations

import numpy as np
from PIL import Image

from retrieval.metrics.classification import calibration_summary, classification_report
from retrieval.report.classification_plots import plot_classification


def test_plot_classification_writes_the_three_pngs(tmp_path):
    rng = np.random.default_rng(0)
    targets = rng.integers(0, 4, size=60)
    logits = rng.normal(size=(60, 4)) + 2.0 * np.eye(4)[targets]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    report = classification_report(probabilities, targets)
    written = plot_classification(report, tmp_path, calibration_summary(probabilities, targets))
    assert [path.name for path in written] == ["pr_curves.png", "confusion.png", "reliability.png"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(path.name for path in written)
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 100
