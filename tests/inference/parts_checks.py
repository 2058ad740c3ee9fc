"""What the embed tests compare embedding files with: the same rows, and the same vectors to float32 rounding."""

from __future__ import annotations

import numpy as np


def assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """The same rows in the same order; embeddings equal to float32 rounding (other thread counts sum otherwise)."""
    assert actual.keys() == expected.keys()
    for key in expected:
        if key == "embeddings":
            np.testing.assert_allclose(actual[key], expected[key], rtol=0, atol=1e-6)
        else:
            assert actual[key].tolist() == expected[key].tolist(), key
