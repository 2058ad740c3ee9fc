"""Calibration of a classifier's softmax: ECE, Brier score, reliability bins and temperature scaling.

Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017) divides
the logits by one scalar T > 0 fitted by minimizing the negative log-likelihood on held-out data;
it changes the confidence, never the argmax. T > 1 softens an over-confident classifier.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax
from sklearn.metrics import brier_score_loss

__all__ = [
    "ECE_BINS",
    "brier_score",
    "expected_calibration_error",
    "fit_temperature",
    "reliability_bins",
    "temperature_nll",
    "temperature_softmax",
]

ECE_BINS = 15  # Guo et al.'s choice
_LOG_T_BOUNDS = (math.log(1e-2), math.log(1e2))


def temperature_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """`(N, K)` float64 probabilities `softmax(logits / T)`."""
    return softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)


def temperature_nll(logits: np.ndarray, targets: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of `targets` under `softmax(logits / T)`."""
    log_p = log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)
    return float(-log_p[np.arange(len(targets)), targets].mean())


def fit_temperature(logits: np.ndarray, targets: np.ndarray) -> float:
    """The temperature T in [0.01, 100] minimizing the NLL of `softmax(logits / T)` on held-out data.

    The NLL is convex in 1/T (a log-sum-exp of linear functions minus a linear one), so it is
    unimodal in log T and a bounded scalar search (Brent) finds the optimum.

    Args:
        logits: `(N, K)` logits of the calibration images.
        targets: `(N,)` their true classes in `[0, K)`.

    Returns:
        T; a value at a bound means the logits are (nearly) all right or all wrong with margins.
    """
    result = minimize_scalar(
        lambda log_t: temperature_nll(logits, targets, math.exp(log_t)),
        bounds=_LOG_T_BOUNDS,
        method="bounded",
        options={"xatol": 1e-6},
    )
    return math.exp(result.x)


def reliability_bins(probabilities: np.ndarray, targets: np.ndarray, num_bins: int = ECE_BINS) -> dict[str, list]:
    """Top-label confidence vs accuracy on equal-width bins of [0, 1].

    Bin b holds the samples whose confidence `max_k p_k` lies in `(b / n, (b + 1) / n]` (the first
    bin also holds 0), the binning of scikit-learn's `calibration_curve(strategy="uniform")`.

    Returns:
        `edges` (n + 1), and per bin `count`, `accuracy` and `confidence` (means; NaN for empty bins).
    """
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == targets
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    bins = np.searchsorted(edges[1:-1], confidence, side="left")
    counts = np.bincount(bins, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(bins, weights=correct, minlength=num_bins) / counts
        mean_confidence = np.bincount(bins, weights=confidence, minlength=num_bins) / counts
    return {
        "edges": edges.tolist(),
        "count": counts.tolist(),
        "accuracy": accuracy.tolist(),
        "confidence": mean_confidence.tolist(),
    }


def expected_calibration_error(probabilities: np.ndarray, targets: np.ndarray, num_bins: int = ECE_BINS) -> float:
    """Top-label ECE: `sum_b (n_b / N) |accuracy_b - confidence_b|` over `num_bins` equal-width bins.

    Args:
        probabilities: `(N, K)` predicted class probabilities.
        targets: `(N,)` true classes in `[0, K)`.
        num_bins: 15 by default (Guo et al. 2017).
    """
    bins = reliability_bins(probabilities, targets, num_bins)
    counts = np.asarray(bins["count"])
    gaps = np.abs(np.asarray(bins["accuracy"]) - np.asarray(bins["confidence"]))
    return float(np.sum(counts[counts > 0] * gaps[counts > 0]) / counts.sum())


def brier_score(probabilities: np.ndarray, targets: np.ndarray) -> float:
    """Multi-class Brier score `mean_i sum_k (p_ik - [y_i = k])^2` (Brier 1950; 0 best, 2 worst).

    Computed by scikit-learn's `brier_score_loss` with every class listed, so classes absent from
    `targets` still count.
    """
    num_classes = probabilities.shape[1]
    return float(brier_score_loss(targets, probabilities, labels=np.arange(num_classes), scale_by_half=False))
