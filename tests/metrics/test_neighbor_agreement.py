"""`nearest_neighbor_agreement`: the share of items whose nearest neighbour an approximation keeps."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.metrics import nearest_neighbor_agreement


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def naive_agreement(reference: np.ndarray, other: np.ndarray) -> float:
    """A double loop: the other's nearest must score, under the reference, as high as the reference's nearest."""
    kept = []
    for i in range(len(reference)):
        others = [j for j in range(len(reference)) if j != i]
        chosen = max(others, key=lambda j: float(other[i] @ other[j]))
        kept.append(float(reference[i] @ reference[chosen]) >= max(float(reference[i] @ reference[j]) for j in others))
    return float(np.mean(kept))


def test_agreement_equals_a_naive_count_under_noise():
    rng = np.random.default_rng(0)
    reference = unit(rng.normal(size=(300, 16)))
    noisy = unit(reference + rng.normal(scale=0.15, size=reference.shape))
    agreement = nearest_neighbor_agreement(reference, noisy)
    assert agreement == pytest.approx(naive_agreement(reference, noisy))
    assert 0.1 < agreement < 0.9  # neither trivial case
    assert nearest_neighbor_agreement(reference, reference) == 1.0


def test_a_neighbour_tied_with_the_nearest_counts_as_kept():
    """Under the reference every item has two exact copies; any of them is a nearest neighbour."""
    rng = np.random.default_rng(1)
    reference = np.repeat(unit(rng.normal(size=(20, 8))), 3, axis=0)
    shuffled_copies = reference + rng.normal(scale=1e-4, size=reference.shape).astype(np.float32)
    assert nearest_neighbor_agreement(reference, unit(shuffled_copies)) == 1.0
    assert nearest_neighbor_agreement(reference, np.ones_like(reference)) == pytest.approx(2 / 59, abs=0.05)


def test_agreement_refuses_mismatched_inputs():
    with pytest.raises(ValueError, match="N >= 2"):
        nearest_neighbor_agreement(np.ones((1, 4)), np.ones((1, 4)))
    with pytest.raises(ValueError, match="N >= 2"):
        nearest_neighbor_agreement(np.ones((5, 4)), np.ones((4, 4)))
