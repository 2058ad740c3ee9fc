"""Per-sample weightings for proxy-softmax losses: balance-degree gating and focal weighting."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from retrieval.losses.functional._checks import check_gamma
from retrieval.losses.functional.focal import focal_modulation
from retrieval.losses.functional.gating import (
    GATE_MODES,
    balance_degree_from_cosine,
    check_gate,
    gate_weights_unchecked,
)

__all__ = ["BalanceGate", "FocalWeighting", "optional_gate"]


class BalanceGate(nn.Module):
    """Drops samples already dominated by their class direction (docs/losses.md, balance-degree gating).

    The balance degree b_i comes from the cosine of each sample to its own proxy; the weight
    (`"ct"` cut-off or `"mt"` modulated, see `retrieval.losses.functional.gate_weights`) carries
    no gradient. Before epoch `warmup_epochs` (0-based, told by `set_epoch`) every weight is 1:
    early in training no sample is "safe", and gating then only removes signal.

    Args:
        mode: `"ct"` or `"mt"`.
        tau: threshold on b; default 1.0, useful range 0.5 to 2.0.
        warmup_epochs: epochs trained ungated; default 5.

    Attributes:
        last_stats: detached `b` and `w`, both (B,), of the last call.
    """

    def __init__(self, mode: str, tau: float = 1.0, warmup_epochs: int = 5) -> None:
        super().__init__()
        if mode not in GATE_MODES:
            raise ValueError(f"gate must be null, 'ct' (cut-off) or 'mt' (modulated), got {mode!r}")
        check_gate(mode, tau)
        if warmup_epochs < 0:
            raise ValueError(f"gate_warmup_epochs must be >= 0, got {warmup_epochs}")
        self.mode = mode
        self.tau = float(tau)
        self.warmup_epochs = int(warmup_epochs)
        self.epoch = 0
        self.last_stats: dict[str, Tensor] = {}

    @property
    def active(self) -> bool:
        """Whether the warm-up is over."""
        return self.epoch >= self.warmup_epochs

    def set_epoch(self, epoch: int) -> None:
        """Record the 0-based epoch about to be trained."""
        self.epoch = int(epoch)

    def forward(self, cosine: Tensor, cross_entropy: Tensor, labels: Tensor) -> Tensor:
        """`(B,)` detached weights in [0, 1]; all ones during the warm-up."""
        b = balance_degree_from_cosine(cosine.detach().gather(1, labels.view(-1, 1)).squeeze(1))
        w = gate_weights_unchecked(b, self.tau, self.mode) if self.active else torch.ones_like(b)
        self.last_stats = {"b": b, "w": w}
        return w

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, tau={self.tau}, warmup_epochs={self.warmup_epochs}, epoch={self.epoch}"


def optional_gate(gate: str | None, tau: float, warmup_epochs: int) -> BalanceGate | None:
    """The `BalanceGate` a preset's `gate`, `tau` and `gate_warmup_epochs` arguments ask for (None: no gate)."""
    return None if gate is None else BalanceGate(gate, tau, warmup_epochs)


class FocalWeighting(nn.Module):
    """Focal weight `alpha_{y_i} * (1 - p_t)^gamma` on each sample's cross-entropy (Lin et al., 2017).

    The weight keeps its gradient: weight times cross-entropy is then exactly the focal loss,
    `retrieval.losses.functional.focal_loss`, in value and gradient.

    Args:
        gamma: focusing exponent, >= 0; 0 gives the plain cross-entropy.
        alpha: optional per-class weights, one per proxy.
    """

    def __init__(self, gamma: float = 2.0, alpha: Sequence[float] | Tensor | None = None) -> None:
        super().__init__()
        check_gamma(gamma)
        self.gamma = float(gamma)
        self.alpha: Tensor | None
        self.register_buffer("alpha", None if alpha is None else torch.as_tensor(alpha, dtype=torch.float32))

    def forward(self, cosine: Tensor, cross_entropy: Tensor, labels: Tensor) -> Tensor:
        """`(B,)` focal factors, differentiable."""
        return focal_modulation(cross_entropy, labels, self.gamma, self.alpha)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, alpha={'per-class' if self.alpha is not None else None}"
