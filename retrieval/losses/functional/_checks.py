"""Argument checks and reductions shared by the per-sample losses (focal, asymmetric)."""

from __future__ import annotations

from torch import Tensor

_REDUCTIONS = ("mean", "sum", "none")


def check_gamma(gamma: float, name: str = "gamma") -> None:
    """Raise ValueError unless a focusing exponent is >= 0."""
    if not gamma >= 0:
        raise ValueError(f"{name} must be >= 0 (0 turns focusing off), got {gamma}")


def check_reduction(reduction: str) -> None:
    """Raise ValueError unless `reduction` is mean, sum or none."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")


def reduce_loss(losses: Tensor, reduction: str) -> Tensor:
    """`"mean"` or `"sum"` of `(B,)` per-sample losses, or the losses themselves for `"none"`."""
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    return losses
