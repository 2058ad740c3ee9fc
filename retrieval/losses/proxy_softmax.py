"""The proxy-softmax mechanism every proxy loss is built from (losses.md, section 1).

cosine logits to all proxies -> per-sample scale -> optional margin on the target ->
per-sample cross-entropy -> optional per-sample weight -> optional per-class weight -> mean over the batch.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from retrieval.losses.functional.proxy import cosine_to_proxies, weighted_cross_entropy

__all__ = ["Margin", "ProxySoftmaxLoss", "SampleWeighting"]


class Margin(Protocol):
    """Changes the target cosine before scaling (CosFace: `cos - m`, ArcFace: `cos(theta + m)`)."""

    def __call__(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines -> `(B, K)` cosines with only column `y_i` of each row changed."""
        ...


class SampleWeighting(Protocol):
    """Per-sample weight on the cross-entropy (balance-degree gating, focal weighting)."""

    def __call__(self, cosine: Tensor, logits: Tensor, labels: Tensor) -> Tensor:
        """`(B, K)` cosines and scaled logits -> `(B,)` weights."""
        ...


class ProxySoftmaxLoss(nn.Module):
    """Cross-entropy over scaled cosines to learnable class proxies.

    Presets (`ProxyNCALoss`, `AnchorLoss`, ...) choose the pieces; this class runs them. Logits
    are computed in float32 even under autocast.

    Args:
        num_classes: K, the number of training classes (one proxy each).
        embedding_dim: D, the embedding size.
        scale: module mapping `(B, K)` cosines and `(B,)` labels to `(B,)` per-sample scales.
        margin: optional change of the target cosine before scaling.
        weighting: optional per-sample weight on the cross-entropy.

    Attributes:
        class_weights: optional `(K,)` buffer of per-class weights on the cross-entropy (None: all 1),
            set by `set_class_weights` (config `loss.class_weights`, from the training class counts).
        proxies: `(K, D)` parameter, `kaiming_normal_` initialized; the trainer gives it its own
            learning rate and no weight decay.
        last_stats: detached per-sample tensors of the last call: `scale`, plus each piece's stats.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        scale: nn.Module,
        margin: Margin | None = None,
        weighting: SampleWeighting | None = None,
    ) -> None:
        super().__init__()
        if num_classes < 1 or embedding_dim < 1:
            raise ValueError(f"need num_classes >= 1 and embedding_dim >= 1, got {num_classes} and {embedding_dim}")
        self.proxies = nn.Parameter(torch.empty(num_classes, embedding_dim))
        nn.init.kaiming_normal_(self.proxies, mode="fan_out")
        self.scale = scale
        self.margin = margin
        self.weighting = weighting
        self.register_buffer("class_weights", None)
        self.last_stats: dict[str, Tensor] = {}

    @property
    def num_classes(self) -> int:
        """K, the number of proxies."""
        return self.proxies.shape[0]

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of raw embeddings `(B, D)` with class indices `(B,)` in `[0, K)`; returns a scalar."""
        self._check_labels(labels)
        cosine = cosine_to_proxies(embeddings, self.proxies)
        scales = self.scale(cosine, labels)
        target_cosine = cosine if self.margin is None else self.margin(cosine, labels)
        logits = scales.unsqueeze(1) * target_cosine
        weights = None if self.weighting is None else self.weighting(cosine, logits, labels)
        loss = weighted_cross_entropy(logits, labels, weights, self.class_weights)
        self.last_stats = {"scale": scales.detach(), **getattr(self.scale, "last_stats", {})}
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
