"""Where and how the model runs: device, autocast dtype, memory format."""

from __future__ import annotations

import torch
from torch import nn

from retrieval.errors import UserError

__all__ = ["amp_dtype", "place_model", "resolve_device", "uses_channels_last"]


def resolve_device(name: str) -> torch.device:
    """`auto` -> the first GPU if there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"train.device is {name} but no CUDA GPU is available; use train.device=cpu or auto")
    return torch.device(name)


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype for `train.amp` (`auto`: bf16 on GPU, none on CPU; fp16 trains with loss scaling)."""
    if amp not in ("none", "bf16", "fp16", "auto"):
        raise UserError(f"train.amp must be none, bf16, fp16 or auto, got {amp!r}")
    if amp == "fp16":
        return torch.float16
    if amp == "bf16" or (amp == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def uses_channels_last(requested: bool, device: torch.device) -> bool:
    """channels_last (NHWC) pays off on GPU tensor cores; on the CPU it is left off."""
    return requested and device.type == "cuda"


def place_model(model: nn.Module, device: torch.device, channels_last: bool) -> nn.Module:
    """Move `model` to `device`, in channels_last memory format when asked."""
    model = model.to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model
