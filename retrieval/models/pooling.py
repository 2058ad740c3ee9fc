"""Global pooling of backbone features into one vector per image."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["POOLINGS", "GeneralizedMeanPooling", "GlobalPool"]

POOLINGS = ("avg", "max", "avgmax", "gem")


class GeneralizedMeanPooling(nn.Module):
    """GeM pooling `(mean x^p)^(1/p)` with a learnable p (Radenovic et al., TPAMI 2018; default p = 3).

    Inputs are clamped at `eps` first, so the power stays defined after a non-ReLU backbone.
    """

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(float(p)))
        self.eps = eps

    def forward(self, features: Tensor, dims: tuple[int, ...]) -> Tensor:
        """Pool `features` over `dims`."""
        return features.clamp(min=self.eps).pow(self.p).mean(dim=dims).pow(1.0 / self.p)


class GlobalPool(nn.Module):
    """Pools `(B, C, H, W)` feature maps or `(B, N, C)` token sequences to `(B, C)`.

    `avgmax` is the *sum* of average and max pooling (the strong-baseline recipe), not timm's
    `avgmax`, which is their mean.
    """

    def __init__(self, kind: str = "avgmax") -> None:
        super().__init__()
        if kind not in POOLINGS:
            raise ValueError(f"unknown pooling {kind!r}; valid: {', '.join(POOLINGS)}")
        self.kind = kind
        self.gem = GeneralizedMeanPooling() if kind == "gem" else None

    def forward(self, features: Tensor) -> Tensor:
        """`(B, C, H, W)` or `(B, N, C)` -> `(B, C)`."""
        dims = (2, 3) if features.ndim == 4 else (1,)
        if self.gem is not None:
            return self.gem(features, dims)
        if self.kind == "avg":
            return features.mean(dim=dims)
        pooled_max = features.amax(dim=dims)
        return pooled_max if self.kind == "max" else pooled_max + features.mean(dim=dims)
