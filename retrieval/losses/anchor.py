"""Anchor Loss: Proxy-NCA with a per-sample scale from semantic difficulty, docs/losses.md section 1."""

from __future__ import annotations

from retrieval.losses.margin_presets import CosineMargin
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import AdaptiveScale
from retrieval.losses.weightings import optional_gate

__all__ = ["AnchorLoss"]


class AnchorLoss(ProxySoftmaxLoss):
    """Proxy softmax whose scale `s_i = gamma * c_i` grows with how close sample i lies to other classes.

    `c_i = 1 + ||ReLU(cos_ij), j != y_i||_2 / sqrt(K - 1)` lies in [1, 2]: a sample near other
    classes' proxies gets a sharper softmax, i.e. a larger push away from them. Related to
    AdaCos (Zhang et al., CVPR 2019), which adapts one scale per batch; here the scale is per
    sample and anchored on the class proxies. This is *not* the "Anchor Loss" of Ryou et al.
    (ICCV 2019), a focal-style weighting for classification.

    With every c_i = 1 and `margin=0` it equals `ProxyNCALoss(scale=gamma)` (the spec's form).

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        gamma: base scale; default 16.
        detach_scale: treat s_i as a constant (default). Gradients through the scale make
            early training unstable; `False` lets them flow.
        difficulty: how c_i is computed: `"norm"` (the formula above, default) or `"max"`,
            `c_i = 1 + max_j ReLU(cos_ij), j != y_i` (the nearest other class).
        margin: additive cosine margin m on the target (`cos - m`, as CosFace); default 0.35, which
            beat the margin-free form on validation MAP@R on every from-scratch dev benchmark
            (docs/losses.md, "Anchor Loss"); 0 gives the spec's form.
        gate: optional balance-degree gating, `"ct"` or `"mt"`, as on `ProxyNCALoss`.
        tau: the gate's threshold; default 1.0.
        gate_warmup_epochs: epochs trained ungated; default 5.

    `last_stats` holds the detached per-sample `scale` and `c` of the last call (and `b`, `w`
    when gated), plus `logits` and `labels`.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        gamma: float = 16.0,
        detach_scale: bool = True,
        difficulty: str = "norm",
        margin: float = 0.35,
        gate: str | None = None,
        tau: float = 1.0,
        gate_warmup_epochs: int = 5,
    ) -> None:
        super().__init__(
            num_classes,
            embedding_dim,
            scale=AdaptiveScale(gamma, detach=detach_scale, difficulty=difficulty),
            margin=CosineMargin(margin) if margin else None,
            weighting=optional_gate(gate, tau, gate_warmup_epochs),
        )
