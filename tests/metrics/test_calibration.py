"""Calibration metrics and temperature scaling against naive loops, scikit-learn and a brute-force grid."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve

from retrieval.metrics.calibration import (
    brier_score,
    expected_calibration_error,
    fit_temperature,
    reliability_bins,
    temperature_nll,
    temperature_softmax,
)


def _overconfident(seed: int = 0, n: int = 600, k: int = 5, true_temperature: float = 3.0):
    """Labels drawn from softmax(z / 3): the logits z are three times too sharp."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=4.0, size=(n, k))
    probabilities = temperature_softmax(logits, true_temperature)
    targets = np.array([rng.choice(k, p=p) for p in probabilities])
    return logits, targets


def _naive_ece(probabilities, targets, bins=15):
    total = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        members = [i for i, p in enumerate(probabilities) if (low < p.max() <= high) or (b == 0 and p.max() == 0)]
        if members:
            accuracy = np.mean([probabilities[i].argmax() == targets[i] for i in members])
            confidence = np.mean([probabilities[i].max() for i in members])
            total += len(members) / len(targets) * abs(accuracy - confidence)
    return total


def test_ece_and_brier_equal_naive_loops_and_scikit_learn():
    logits, targets = _overconfident()
    probabilities = temperature_softmax(logits)
    assert expected_calibration_error(probabilities, targets) == pytest.approx(_naive_ece(probabilities, targets))
    brier = np.mean(
        [sum((p[k] - (k == y)) ** 2 for k in range(5)) for p, y in zip(probabilities, targets, strict=True)]
    )
    assert brier_score(probabilities, targets) == pytest.approx(brier)
    bins = reliability_bins(probabilities, targets)
    correct = probabilities.argmax(1) == targets
    prob_true, prob_pred = calibration_curve(correct, probabilities.max(1), n_bins=15, strategy="uniform")
    filled = np.asarray(bins["count"]) > 0
    np.testing.assert_allclose(np.asarray(bins["accuracy"])[filled], prob_true)
    np.testing.assert_allclose(np.asarray(bins["confidence"])[filled], prob_pred)


def test_temperature_of_overconfident_logits_is_above_one_and_lowers_ece_and_brier():
    logits, targets = _overconfident(seed=1)
    temperature = fit_temperature(logits, targets)
    assert 2.0 < temperature < 4.5  # the truth is 3
    before, after = temperature_softmax(logits), temperature_softmax(logits, temperature)
    assert expected_calibration_error(after, targets) < 0.5 * expected_calibration_error(before, targets)
    assert brier_score(after, targets) < brier_score(before, targets)
    assert np.array_equal(before.argmax(1), after.argmax(1))  # scaling never changes the prediction


@pytest.mark.parametrize("seed", [2, 3])
def test_fitted_temperature_matches_a_brute_force_grid(seed):
    logits, targets = _overconfident(seed=seed, true_temperature=0.5 + seed)
    grid = np.exp(np.linspace(np.log(0.05), np.log(20), 4001))
    best = grid[np.argmin([temperature_nll(logits, targets, t) for t in grid])]
    fitted = fit_temperature(logits, targets)
    assert fitted == pytest.approx(best, rel=2e-3)
    assert temperature_nll(logits, targets, fitted) <= temperature_nll(logits, targets, best) + 1e-9
