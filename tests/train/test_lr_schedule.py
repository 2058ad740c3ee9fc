"""Warm-up then cosine decay."""

import math

import pytest

from retrieval.train.schedule import lr_factor


def test_warmup_rises_linearly_then_cosine_decays_to_zero():
    warmup, total = 10, 110
    factors = [lr_factor(step, warmup, total) for step in range(total + 1)]
    assert factors[:warmup] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    assert factors[warmup] == pytest.approx(1.0)
    assert factors[warmup + 50] == pytest.approx(0.5)
    assert factors[total] == pytest.approx(0.0, abs=1e-12)
    decay = factors[warmup:]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))
    assert factors[warmup + 25] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_no_warmup_starts_at_the_full_rate():
    assert lr_factor(0, 0, 100) == pytest.approx(1.0)
