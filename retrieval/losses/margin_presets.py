"""The margin presets of proxy-softmax losses as modules: additive cosine (CosFace) and additive angle (ArcFace).

Each holds and checks its margin; the math is `retrieval.losses.functional.margins`.
"""

from __future__ import annotations

from torch import Tensor, nn

from retrieval.losses.functional.margins import additive_angular_margin, additive_cosine_margin

__all__ = ["AngularMargin", "CosineMargin"]


def _check_margin(margin: float) -> float:
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    return float(margin)


class CosineMargin(nn.Module):
    """The target cosine becomes `cos - m` (CosFace)."""

    def __init__(self, margin: float) -> None:
        super().__init__()
        self.margin = _check_margin(margin)

    def forward(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines with the target column lowered by m."""
        return additive_cosine_margin(cosine, labels, self.margin)

    def extra_repr(self) -> str:
        return f"margin={self.margin}"


class AngularMargin(nn.Module):
    """The target cosine becomes `cos(theta + m)`, with the monotone fallback past pi (ArcFace)."""

    def __init__(self, margin: float) -> None:
        super().__init__()
        self.margin = _check_margin(margin)

    def forward(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines with the target column replaced by cos(theta + m)."""
        return additive_angular_margin(cosine, labels, self.margin)

    def extra_repr(self) -> str:
        return f"margin={self.margin}"
