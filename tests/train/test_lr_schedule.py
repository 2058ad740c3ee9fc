"""Warm-up then cosine decay, and the autocast choice per device."""

import math

import pytest
import torch

from retrieval.errors import UserError
from retrieval.runtime.device import amp_dtype
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


def test_amp_auto_is_bf16_on_gpu_only():
    assert amp_dtype("auto", torch.device("cpu")) is None
    assert amp_dtype("auto", torch.device("cuda")) is torch.bfloat16
    assert amp_dtype("bf16", torch.device("cpu")) is torch.bfloat16
    assert amp_dtype("none", torch.device("cuda")) is None
    assert amp_dtype("fp16", torch.device("cpu")) is torch.float16
    with pytest.raises(UserError, match="train.amp must be none, bf16, fp16 or auto"):
        amp_dtype("fp8", torch.device("cpu"))
