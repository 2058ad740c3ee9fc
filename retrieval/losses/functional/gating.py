"""Balance-degree gating (docs/losses.md section 1): how much a feature is dominated by its class direction.

`b_i = log((||l_i||^2 + eps) / (||e_i||^2 + eps))`, with `l_i` the positive projection of the
unit feature on its unit class anchor and `e_i` the rest. b is large for a feature that lies
on its anchor ("safe already"), 0 at 45 degrees and very negative for orthogonal or opposite
features. The gates turn b into a per-sample weight in [0, 1] that drops safe samples.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["GATE_MODES", "balance_degree", "balance_degree_from_cosine", "gate_weights"]

GATE_MODES = ("ct", "mt")

# Floor of both squared norms: caps b at about +-log(1 / eps) = +-13.8 for features on (or
# orthogonal to) their anchor, instead of +-inf.
_EPS = 1e-6


def balance_degree(embeddings: Tensor, anchors: Tensor, labels: Tensor, eps: float = _EPS) -> Tensor:
    """Balance degree b_i of each feature with respect to its class anchor, detached.

    Features and anchors are L2-normalized first: the ratio ||l||^2 / ||e||^2 does not depend on
    the feature's norm, and with unit vectors `eps` has the same meaning whatever the norm is.
    Only the positive projection counts: an anti-aligned feature (cos < 0) is the hardest
    sample, not a safe one, so its l is 0 and its b is at the floor.

    Args:
        embeddings: `(B, D)` raw features x_i.
        anchors: `(K, D)` class anchors (proxies or classifier weight rows) w_j.
        labels: `(B,)` class index of each feature, in `[0, K)`.
        eps: floor added to both squared norms.

    Returns:
        `(B,)` float32 b_i, without gradient; b = log(cos^2 / (1 - cos^2)) for cos > 0.

    Raises:
        ValueError: on mismatched shapes.
    """
    if embeddings.ndim != 2 or anchors.ndim != 2 or embeddings.shape[1] != anchors.shape[1]:
        raise ValueError(
            f"need embeddings (B, D) and anchors (K, D) of the same D, got {tuple(embeddings.shape)} "
            f"and {tuple(anchors.shape)}"
        )
    if labels.shape != (embeddings.shape[0],):
        raise ValueError(f"labels must have shape ({embeddings.shape[0]},), got {tuple(labels.shape)}")
    with torch.autocast(embeddings.device.type, enabled=False):
        features = F.normalize(embeddings.detach().float(), dim=1)
        directions = F.normalize(anchors.detach().float(), dim=1)[labels]
        return balance_degree_from_cosine((features * directions).sum(dim=1), eps)


def balance_degree_from_cosine(target_cosine: Tensor, eps: float = _EPS) -> Tensor:
    """`balance_degree` from each unit feature's cosine to its unit anchor, detached.

    For unit vectors ||l||^2 = relu(cos)^2 and ||e||^2 = 1 - relu(cos)^2, so the proxy-softmax
    losses get b from the cosines they already hold, without a second projection.

    Args:
        target_cosine: `(B,)` cosine of each feature to its own class anchor.
        eps: floor added to both squared norms.

    Returns:
        `(B,)` b_i, without gradient.
    """
    # This runs on every step of a gated loss, so in few kernels: with a = relu(cos)^2 and
    # x = (a + eps) / (1 + 2 eps), logit(x) = log(x / (1 - x)) = log((a + eps) / (1 - a + eps)).
    shrink = 1.0 / (1.0 + 2.0 * eps)
    positive = target_cosine.detach().clamp(0.0, 1.0)
    return torch.addcmul(positive.new_full((), eps * shrink), positive, positive, value=shrink).logit_()


def gate_weights(b: Tensor, tau: float = 1.0, mode: str = "mt") -> Tensor:
    """Per-sample weights in [0, 1] from balance degrees, without gradient.

    - `"ct"` (cut-off): `w = 1 if b < tau else 0`.
    - `"mt"` (modulated): `w = clamp(1 - max(b, 0) / tau, 0, 1)`: 1 for b <= 0 (at or beyond 45
      degrees from the anchor), falling linearly to 0 at b = tau. Never above 1.

    Args:
        b: `(B,)` balance degrees.
        tau: threshold; default 1.0, useful range 0.5 to 2.0.
        mode: `"ct"` or `"mt"`.

    Returns:
        `(B,)` weights, same dtype as b.

    Raises:
        ValueError: on an unknown mode or tau <= 0.
    """
    check_gate(mode, tau)
    return gate_weights_unchecked(b.detach(), tau, mode)


def check_gate(mode: str, tau: float) -> None:
    """Raise ValueError unless `mode` is a gate mode and tau > 0."""
    if mode not in GATE_MODES:
        raise ValueError(f"gate mode must be one of {', '.join(GATE_MODES)} (cut-off, modulated), got {mode!r}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0 (useful range 0.5 to 2.0), got {tau}")


def gate_weights_unchecked(b: Tensor, tau: float, mode: str) -> Tensor:
    """`gate_weights` of detached b with arguments already checked (the per-step path of `BalanceGate`)."""
    if mode == "ct":
        return (b < tau).to(b.dtype)
    return torch.rsub(b.clamp(0.0, tau), 1.0, alpha=1.0 / tau)  # 1 - clamp(b, 0, tau) / tau
