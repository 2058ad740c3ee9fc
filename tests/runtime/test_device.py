"""The autocast choice per device."""

import pytest
import torch

from retrieval.errors import UserError
from retrieval.runtime.device import amp_dtype


def test_amp_auto_is_bf16_on_gpu_only():
    assert amp_dtype("auto", torch.device("cpu")) is None
    assert amp_dtype("auto", torch.device("cuda")) is torch.bfloat16
    assert amp_dtype("bf16", torch.device("cpu")) is torch.bfloat16
    assert amp_dtype("none", torch.device("cuda")) is None
    assert amp_dtype("fp16", torch.device("cpu")) is torch.float16
    with pytest.raises(UserError, match="train.amp must be none, bf16, fp16 or auto"):
        amp_dtype("fp8", torch.device("cpu"))
