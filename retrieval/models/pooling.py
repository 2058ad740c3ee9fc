"""Global pooling of backbone features into one vector per image.

`avg`, `max` and `token` are timm's own pooling, run by the backbone's `forward_head(pre_logits=True)`:
it knows the model (a ViT averages its patch tokens without the class token, `token` is the class
token, ConvNeXt applies its head norm). `avgmax` and `gem` are our additions for CNN feature maps,
applied here to `forward_features`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["FEATURE_MAP_POOLINGS", "POOLINGS", "TIMM_POOLINGS", "GeneralizedMeanPooling", "GlobalPool"]

TIMM_POOLINGS = ("avg", "max", "token")
FEATURE_MAP_POOLINGS = ("avgmax", "gem")
POOLINGS = TIMM_POOLINGS + FEATURE_MAP_POOLINGS


class GeneralizedMeanPooling(nn.Module):
    """GeM pooling `(mean x^p)^(1/p)` with a learnable p (Radenovic et al., TPAMI 2018; default p = 3).

    Inputs are clamped at `eps` first, so the power stays defined after a non-ReLU backbone.
    """

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(float(p)))
        self.eps = eps

    def forward(self, features: Tensor) -> Tensor:
        """`(B, C, H, W)` -> `(B, C)`."""
        return features.clamp(min=self.eps).pow(self.p).mean(dim=(2, 3)).pow(1.0 / self.p)


class GlobalPool(nn.Module):
    """Our poolings of `(B, C, H, W)` feature maps to `(B, C)`: `avgmax` or `gem`.

    `avgmax` is the *sum* of average and max pooling (the strong-baseline recipe); timm's `avgmax`
    is their mean. The two differ by a factor of 2 in front of the Linear head.
    """

    def __init__(self, kind: str = "avgmax") -> None:
        super().__init__()
        if kind not in FEATURE_MAP_POOLINGS:
            raise ValueError(f"GlobalPool pools feature maps with {' or '.join(FEATURE_MAP_POOLINGS)}, got {kind!r}")
        self.kind = kind
        self.gem = GeneralizedMeanPooling() if kind == "gem" else None

    def forward(self, features: Tensor) -> Tensor:
        """`(B, C, H, W)` -> `(B, C)`."""
        if self.gem is not None:
            return self.gem(features)
        return features.amax(dim=(2, 3)) + features.mean(dim=(2, 3))
