"""The proxy classifier as a classifier: one-vs-rest PR curves, confusion matrix, calibration.

A proxy loss trains one proxy per class; `softmax(s * cos(f, P))` is a classifier over the
training classes. On closed-set data (test classes seen in training) it can be scored like one.
Metrics come from scikit-learn (`precision_recall_curve`, `average_precision_score`,
`confusion_matrix`, `brier_score_loss`); the top-label ECE is multi-class, so it is binned here
(`metrics/calibration.py`).
"""

from __future__ import annotations

import numpy as np
from pydantic import ConfigDict
from sklearn.metrics import average_precision_score, confusion_matrix, precision_recall_curve

from retrieval.metrics.calibration import brier_score, expected_calibration_error, reliability_bins
from retrieval.validation import Record

__all__ = [
    "MAX_CONFUSION_CLASSES",
    "MAX_CURVE_CLASSES",
    "CalibrationSummary",
    "ClassificationReport",
    "Curve",
    "Reliability",
    "calibration_summary",
    "classification_report",
]

MAX_CURVE_CLASSES = 20  # per-class PR curves kept (in JSON and drawn) up to this many classes
MAX_CONFUSION_CLASSES = 200  # a K x K matrix beyond this is neither readable nor small
_CURVE_POINTS = 101  # PR curves are resampled at 101 recall levels in the JSON


class _Written(Record):
    """The records of this module are written to JSON as they are: NaN (an empty bin's mean) is kept as NaN."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Reliability(_Written):
    """Top-label confidence vs accuracy per bin (`reliability_bins`): `edges` (n + 1), per bin the rest (NaN: empty)."""

    edges: list[float]
    count: list[int]
    accuracy: list[float]
    confidence: list[float]


class CalibrationSummary(_Written):
    """ECE (15 bins), Brier score, accuracy and the reliability bins of one set of probabilities."""

    accuracy: float
    ece: float
    brier: float
    reliability: Reliability


class Curve(_Written):
    """A PR curve resampled at 101 recall levels (interpolated precision)."""

    recall: list[float]
    precision: list[float]


class ClassificationReport(CalibrationSummary):
    """Everything `retrieval evaluate --classification` writes of the test images (`classification_report`).

    The curves and matrices of many classes are left out (unset, so absent from the file) beyond
    `MAX_CURVE_CLASSES` / `MAX_CONFUSION_CLASSES`.
    """

    num_images: int
    num_classes: int
    average_precision: list[float | None]  # None: a class absent from the test images
    mean_average_precision: float
    pr_micro: Curve
    pr_curves: list[Curve | None] | None = None
    confusion: list[list[int]] | None = None
    confusion_normalized: list[list[float]] | None = None


def calibration_summary(probabilities: np.ndarray, targets: np.ndarray) -> CalibrationSummary:
    """ECE (15 bins), Brier score, accuracy and the reliability bins of one set of probabilities."""
    return CalibrationSummary(
        accuracy=float(np.mean(probabilities.argmax(axis=1) == targets)),
        ece=expected_calibration_error(probabilities, targets),
        brier=brier_score(probabilities, targets),
        reliability=Reliability.model_validate(reliability_bins(probabilities, targets)),
    )


def classification_report(probabilities: np.ndarray, targets: np.ndarray) -> ClassificationReport:
    """Everything `retrieval evaluate --classification` writes, as JSON-ready values.

    Args:
        probabilities: `(N, K)` class probabilities of the test images (rows sum to 1).
        targets: `(N,)` true training-class indices in `[0, K)`.

    Returns:
        The `ClassificationReport` of `accuracy`, `ece`, `brier`, `reliability`; `average_precision`
        per class (one-vs-rest; None for classes absent from `targets`) and `mean_average_precision`
        over the present classes;
        `pr_micro` (the micro-averaged curve) and, with K <= `MAX_CURVE_CLASSES`, `pr_curves` per
        class, each resampled at 101 recall levels (interpolated precision); `confusion` (counts)
        and `confusion_normalized` (rows sum to 1; rows of absent classes are 0) when
        K <= `MAX_CONFUSION_CLASSES`.
    """
    num_classes = probabilities.shape[1]
    onehot = np.eye(num_classes, dtype=bool)[targets]
    present = onehot.any(axis=0)
    per_class_ap: list[float | None] = [None] * num_classes
    for k in np.flatnonzero(present):
        per_class_ap[k] = float(average_precision_score(onehot[:, k], probabilities[:, k]))
    fields = {
        **dict(calibration_summary(probabilities, targets)),
        "num_images": len(targets),
        "num_classes": num_classes,
        "average_precision": per_class_ap,
        "mean_average_precision": float(np.mean([ap for ap in per_class_ap if ap is not None])),
        "pr_micro": _curve(onehot.ravel(), probabilities.ravel()),
    }
    if num_classes <= MAX_CURVE_CLASSES:
        fields["pr_curves"] = [
            _curve(onehot[:, k], probabilities[:, k]) if present[k] else None for k in range(num_classes)
        ]
    if num_classes <= MAX_CONFUSION_CLASSES:
        counts = confusion_matrix(targets, probabilities.argmax(axis=1), labels=np.arange(num_classes))
        rows = counts.sum(axis=1, keepdims=True)
        fields["confusion"] = counts.tolist()
        fields["confusion_normalized"] = np.divide(counts, rows, out=np.zeros(counts.shape), where=rows > 0).tolist()
    return ClassificationReport.model_validate(fields)


def _curve(is_positive: np.ndarray, scores: np.ndarray) -> Curve:
    """One-vs-rest PR curve resampled at 101 recall levels, precision interpolated (max precision at >= recall)."""
    precision, recall, _ = precision_recall_curve(is_positive, scores)
    # recall is decreasing along sklearn's output; the interpolated precision at level r is the
    # best precision reached at any recall >= r (the VOC/COCO convention), monotone by construction.
    best = np.maximum.accumulate(precision)  # along decreasing recall
    levels = np.linspace(0.0, 1.0, _CURVE_POINTS)
    # last point with recall >= level; the 1e-12 keeps e.g. recall 12/40 at the level linspace writes as 0.3 + 4e-17
    index = np.searchsorted(-recall, -levels + 1e-12, side="right") - 1
    interpolated = np.where(index >= 0, best[np.maximum(index, 0)], 0.0)
    return Curve(recall=levels.tolist(), precision=interpolated.tolist())
