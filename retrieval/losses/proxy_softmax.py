"""The proxy-softmax mechanism every proxy loss is built from (docs/losses.md, section 1).

cosine logits to all proxies -> per-sample scale -> optional margin on the target ->
per-sample cross-entropy -> optional per-sample weight -> optional per-class weight -> mean over the batch.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from retrieval.losses.base import MetricLoss
from retrieval.losses.functional.proxy import cosine_to_proxies
from retrieval.losses.scales import AdaptiveScale, FixedScale

__all__ = ["Margin", "ProxySoftmaxLoss", "SampleWeighting", "make_proxies"]


class Margin(Protocol):
    """Changes the target cosine before scaling (CosFace: `cos - m`, ArcFace: `cos(theta + m)`)."""

    def __call__(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines -> `(B, K)` cosines with only column `y_i` of each row changed."""
        ...


class SampleWeighting(Protocol):
    """Per-sample weight on the cross-entropy (balance-degree gating, focal weighting).

    The weight multiplies the per-sample loss as returned: a weighting that must not pass a
    gradient (gating) returns a detached tensor; one whose gradient is part of the loss (focal)
    does not.
    """

    def __call__(self, cosine: Tensor, cross_entropy: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines (before any margin) and `(B,)` per-sample cross-entropy `-log p_t` -> `(B,)` weights."""
        ...


def make_proxies(num_classes: int, embedding_dim: int) -> nn.Parameter:
    """`(K, D)` learnable proxies, `kaiming_normal_` initialized (docs/losses.md, shared conventions).

    Raises:
        ValueError: if K or D is below 1.
    """
    if num_classes < 1 or embedding_dim < 1:
        raise ValueError(f"need num_classes >= 1 and embedding_dim >= 1, got {num_classes} and {embedding_dim}")
    proxies = nn.Parameter(torch.empty(num_classes, embedding_dim))
    nn.init.kaiming_normal_(proxies, mode="fan_out")
    return proxies


class ProxySoftmaxLoss(MetricLoss):
    """Cross-entropy over scaled cosines to learnable class proxies.

    Presets (`ProxyNCALoss`, `AnchorLoss`, ...) choose the pieces; this class runs them. Logits
    are computed in float32 even under autocast.

    Args:
        num_classes: K, the number of training classes (one proxy each).
        embedding_dim: D, the embedding size.
        scale: maps `(B, K)` cosines and `(B,)` labels to `(B,)` per-sample scales (fixed or adaptive).
        margin: optional change of the target cosine before scaling.
        weighting: optional per-sample weight on the cross-entropy.

    Attributes:
        class_weights: optional `(K,)` buffer of per-class weights on the cross-entropy (None: all 1),
            set by `set_class_weights` (config `loss.class_weights`, from the training class counts).
        proxies: `(K, D)` parameter, `kaiming_normal_` initialized; the trainer gives it its own
            learning rate and no weight decay.
        last_stats: detached tensors of the last call, for logging and diagnostics without a
            second backward pass:
            - `scale` (B,): the per-sample softmax scale s_i;
            - `c` (B,): the semantic difficulty c_i (Anchor Loss only);
            - `b`, `w` (B,): the balance degree and gate weight (gated losses only; `w` is all
              ones during the gate's warm-up);
            - `logits` (B, K) float32: the logits the cross-entropy saw (scale and margin applied),
              from which p_t and the gradient at the logits, `softmax - one_hot`, follow;
            - `labels` (B,): the target classes.
        check_labels: check every call's label range (True; see `MetricLoss`).
    """

    proxies: nn.Parameter

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        scale: FixedScale | AdaptiveScale,
        margin: Margin | None = None,
        weighting: SampleWeighting | None = None,
    ) -> None:
        super().__init__()
        self.proxies = make_proxies(num_classes, embedding_dim)
        self.scale = scale
        self.margin = margin
        self.weighting = weighting
        self.register_buffer("class_weights", None)

    @property
    def num_classes(self) -> int:
        """K, the number of proxies."""
        return self.proxies.shape[0]

    @property
    def logit_scale(self) -> float:
        """The scale's base value: s of a fixed scale, gamma of the Anchor Loss's adaptive one."""
        return self.scale.base_scale

    def set_epoch(self, epoch: int) -> None:
        """Tell the pieces the 0-based training epoch (the gate's warm-up counts epochs)."""
        for piece in (self.scale, self.margin, self.weighting):
            hook = getattr(piece, "set_epoch", None)
            if hook is not None:
                hook(epoch)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of raw embeddings `(B, D)` with class indices `(B,)` in `[0, K)`; returns a scalar."""
        if self.check_labels:
            self._check_labels(labels)
        cosine = cosine_to_proxies(embeddings, self.proxies)
        scales = self.scale(cosine, labels)
        target_cosine = cosine if self.margin is None else self.margin(cosine, labels)
        logits = scales.unsqueeze(1) * target_cosine
        cross_entropy = F.cross_entropy(logits, labels, reduction="none")
        per_sample = cross_entropy if self.class_weights is None else cross_entropy * self.class_weights[labels]
        stats = {"scale": scales.detach(), **self.scale.last_stats}
        if self.weighting is None:
            loss = per_sample.mean()
        else:  # mean of w_i * l_i as one dot product: one autograd node fewer than multiply-then-mean
            loss = torch.dot(per_sample, self.weighting(cosine, cross_entropy, labels)) / per_sample.numel()
            stats.update(getattr(self.weighting, "last_stats", {}))
        self.last_stats = {**stats, "logits": logits.detach(), "labels": labels.detach()}
        return loss

    def set_class_weights(self, weights: Tensor | None) -> None:
        """Weight each sample's cross-entropy by its class's entry of `(K,)` `weights` (None: unweighted)."""
        if weights is not None and weights.shape != (self.num_classes,):
            raise ValueError(f"class weights must have shape ({self.num_classes},), got {tuple(weights.shape)}")
        self.class_weights = None if weights is None else weights.to(self.proxies.device, torch.float32)

    def _check_labels(self, labels: Tensor) -> None:
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
            raise ValueError(
                f"labels must lie in [0, {self.num_classes}) for a loss with {self.num_classes} proxies, "
                f"got range [{int(labels.min())}, {int(labels.max())}]; remap class ids to 0..K-1"
            )
