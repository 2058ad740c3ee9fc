"""Per-sample softmax scales for proxy-softmax losses: fixed (Proxy-NCA) or adaptive (Anchor Loss)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from retrieval.losses.functional.proxy import DIFFICULTIES, semantic_difficulty

__all__ = ["AdaptiveScale", "FixedScale"]


class FixedScale(nn.Module):
    """The same scale `s` for every sample (NormSoftmax / Proxy-NCA)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}; 16 to 32 are usual for cosine logits")
        self.scale = float(scale)
        self.last_stats: dict[str, Tensor] = {}

    @property
    def base_scale(self) -> float:
        """s, the scale of every sample."""
        return self.scale

    def forward(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """Return `(B,)` scales, all equal to `s`."""
        return torch.full((cosine.shape[0],), self.scale, dtype=cosine.dtype, device=cosine.device)


class AdaptiveScale(nn.Module):
    """`s_i = gamma * c_i`, with c_i the semantic difficulty of sample i (docs/losses.md, Anchor Loss).

    Samples lying close to other classes' proxies get a sharper softmax. With
    `detach=True` (default) the scale is a constant per sample: gradients through it make
    early training unstable. `difficulty` chooses how c_i is computed (`semantic_difficulty`'s `form`).
    """

    def __init__(self, gamma: float, detach: bool = True, difficulty: str = "norm") -> None:
        super().__init__()
        if gamma <= 0:
            raise ValueError(f"gamma must be > 0, got {gamma}; the published default is 16")
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {', '.join(DIFFICULTIES)}, got {difficulty!r}")
        self.gamma = float(gamma)
        self.detach = detach
        self.difficulty = difficulty
        self.last_stats: dict[str, Tensor] = {}

    @property
    def base_scale(self) -> float:
        """gamma, the scale of a sample with c_i = 1 (the scale without the label-dependent difficulty)."""
        return self.gamma

    def forward(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """Return `(B,)` scales `gamma * c_i`; `last_stats["c"]` keeps the detached c_i."""
        difficulty = semantic_difficulty(cosine.detach() if self.detach else cosine, labels, self.difficulty)
        self.last_stats = {"c": difficulty.detach()}
        return self.gamma * difficulty
