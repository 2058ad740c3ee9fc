"""Proxy-NCA with a fixed scale (the NormSoftmax form), docs/losses.md section 1."""

from __future__ import annotations

from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale
from retrieval.losses.weightings import optional_gate

__all__ = ["ProxyNCALoss"]


class ProxyNCALoss(ProxySoftmaxLoss):
    """Proxy-NCA: softmax cross-entropy over `s * cos(f_i, P_j)` to one proxy per class.

    Movshovitz-Attias et al., "No Fuss Distance Metric Learning using Proxies", ICCV 2017, in
    the normalized-softmax form of Zhai & Wu, "Classification is a Strong Baseline for Deep
    Metric Learning", BMVC 2019. Identical to pytorch-metric-learning's
    `ProxyNCALoss(distance=CosineSimilarity(), softmax_scale=scale)` with the same proxies.

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        scale: the softmax scale s (inverse temperature); default 16.
        gate: optional balance-degree gating, `"ct"` (cut-off) or `"mt"` (modulated): samples
            already dominated by their class direction get weight 0 (see `BalanceGate`).
        tau: the gate's threshold on the balance degree; default 1.0, useful range 0.5 to 2.0.
        gate_warmup_epochs: epochs trained ungated; default 5 (the trainer calls `set_epoch`).
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        scale: float = 16.0,
        gate: str | None = None,
        tau: float = 1.0,
        gate_warmup_epochs: int = 5,
    ) -> None:
        super().__init__(
            num_classes,
            embedding_dim,
            scale=FixedScale(scale),
            weighting=optional_gate(gate, tau, gate_warmup_epochs),
        )
