"""Verification pairs, ROC AUC and thresholds at a target FMR against plain-Python loops over every pair."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.metrics.verification import pairs_of, rates_at, roc_auc, threshold_at_fmr


def _embedded(n: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit embeddings around one direction per class, noisy enough that classes overlap."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = rng.standard_normal((classes, 16))
    embeddings = centres[labels] + 1.2 * rng.standard_normal((n, 16))
    return (embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)).astype(np.float32), labels


def _naive_pairs(embeddings, same) -> list[tuple[float, bool]]:
    """(score, genuine) of every unordered pair, by a double loop (float64 dot products)."""
    rows = embeddings.astype(np.float64)
    return [(float(np.dot(rows[i], rows[j])), same(i, j)) for i in range(len(rows)) for j in range(i + 1, len(rows))]


def _naive_threshold(pairs: list[tuple[float, bool]], target: float) -> tuple[float, float]:
    """(threshold, FNMR): the lowest pair score whose FMR (score >= t) is at most `target`, trying each from the top."""
    impostors = [score for score, genuine in pairs if not genuine]
    genuines = [score for score, genuine in pairs if genuine]
    best = (np.inf, 1.0)
    for candidate in sorted({score for score, _ in pairs}, reverse=True):
        if sum(score >= candidate for score in impostors) / len(impostors) > target:
            break
        best = (candidate, sum(score < candidate for score in genuines) / len(genuines))
    return best


def _naive_auc(pairs: list[tuple[float, bool]]) -> float:
    """P(genuine score > impostor score) + P(tie) / 2 over every (genuine, impostor) couple."""
    genuines = [score for score, genuine in pairs if genuine]
    impostors = [score for score, genuine in pairs if not genuine]
    wins = sum((g > i) + 0.5 * (g == i) for g, i in itertools.product(genuines, impostors))
    return wins / (len(genuines) * len(impostors))


def test_pairs_auc_and_thresholds_match_brute_force_loops() -> None:
    embeddings, labels = _embedded(70, 5, seed=0)
    naive = _naive_pairs(embeddings, lambda i, j: bool(labels[i] == labels[j]))
    pairs = pairs_of(embeddings, labels)
    assert pairs.total == len(pairs.scores) == 70 * 69 // 2 and not pairs.sampled
    for genuine in (True, False):
        expected = sorted(score for score, same in naive if same == genuine)
        np.testing.assert_allclose(np.sort(pairs.scores[pairs.genuine == genuine]), expected, atol=1e-12)
    assert roc_auc(pairs) == pytest.approx(_naive_auc(naive), abs=1e-6)
    for target in (1e-1, 1e-2, 1e-3, 1e-4):
        point = threshold_at_fmr(pairs, target)
        threshold, fnmr = _naive_threshold(naive, target)
        assert point.threshold == pytest.approx(threshold, abs=1e-6)
        assert point.fnmr == pytest.approx(fnmr, abs=1e-9) and point.fmr <= target
        assert rates_at(pairs, point.threshold) == pytest.approx((point.fmr, point.fnmr))


def test_query_gallery_pairs_and_multi_label_sharing() -> None:
    embeddings, _ = _embedded(30, 3, seed=1)
    multi_hot = np.random.default_rng(2).random((30, 4)) < 0.4
    multi_hot[:, 0] |= ~multi_hot.any(axis=1)  # every image carries a label
    queries, gallery = np.arange(30) < 10, np.arange(30) >= 5  # rows 5-9 are both
    pairs = pairs_of(embeddings, multi_hot, queries, gallery)
    rows = embeddings.astype(np.float64)
    expected = [
        (float(np.dot(rows[q], rows[g])), bool((multi_hot[q] & multi_hot[g]).any()))
        for q in range(10)
        for g in range(5, 30)
        if q != g
    ]
    assert pairs.total == len(pairs.scores) == len(expected) == 10 * 25 - 5
    for genuine in (True, False):
        wanted = sorted(score for score, same in expected if same == genuine)
        np.testing.assert_allclose(np.sort(pairs.scores[pairs.genuine == genuine]), wanted, atol=1e-12)


def test_a_large_split_is_a_uniform_sample_of_its_pairs() -> None:
    embeddings, labels = _embedded(400, 4, seed=3)
    every = pairs_of(embeddings, labels)
    sample = pairs_of(embeddings, labels, max_pairs=20_000, seed=0)
    assert sample.sampled and sample.total == every.total == 400 * 399 // 2
    assert 19_800 < len(sample.scores) <= 20_000  # pairs of an image with itself are drawn and dropped
    assert abs(sample.genuine.mean() - every.genuine.mean()) < 0.02
    assert abs(roc_auc(sample) - roc_auc(every)) < 0.02


def test_a_target_no_threshold_reaches_matches_nothing_and_one_class_is_refused() -> None:
    embeddings = np.eye(4, dtype=np.float32)[[0, 0, 1, 1]]
    embeddings[3] = embeddings[0]  # an impostor pair (0, 3) scores 1.0, as high as the genuine pair (0, 1)
    point = threshold_at_fmr(pairs_of(embeddings, np.array([0, 0, 1, 1])), 0.1)
    assert point.threshold > 1.0 and (point.fmr, point.fnmr) == (0.0, 1.0)
    with pytest.raises(UserError, match="no different-class pair"):
        pairs_of(embeddings, np.zeros(4, dtype=int))
    with pytest.raises(UserError, match=r"must lie in \(0, 1\)"):
        threshold_at_fmr(pairs_of(embeddings, np.array([0, 0, 1, 1])), 0.0)
