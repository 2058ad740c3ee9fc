"""Proxy-Anchor (Kim et al., CVPR 2020), wrapping pytorch-metric-learning; docs/losses.md section 4."""

from __future__ import annotations

import torch
from pytorch_metric_learning.losses import ProxyAnchorLoss as _PMLProxyAnchorLoss
from torch import Tensor, nn

from retrieval.losses.base import MetricLoss

__all__ = ["ProxyAnchorLoss"]


class ProxyAnchorLoss(MetricLoss):
    """Proxy-Anchor: each proxy pulls all its batch samples and pushes all others, with soft weights.

    Kim et al., "Proxy Anchor Loss for Deep Metric Learning", CVPR 2020: for the proxies P+ with
    a sample in the batch and all proxies P,
    `1/|P+| sum_p log(1 + sum_{x in X_p+} exp(-alpha (cos(x, p) - delta)))
     + 1/|P| sum_p log(1 + sum_{x in X_p-} exp(alpha (cos(x, p) + delta)))`.
    The strongest proxy baseline of the deep metric learning literature. This runs
    pytorch-metric-learning's `ProxyAnchorLoss` in float32 (under autocast too: PML would cast
    the proxies themselves to the embeddings' dtype).

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        margin: delta; default 0.1.
        alpha: scale; default 32.

    Attributes:
        proxies: `(K, D)` parameter (PML's, `kaiming_normal_` initialized); the trainer gives it
            the proxy learning rate and no weight decay.
        last_stats: empty (Proxy-Anchor has no per-sample scale or weight).
        logit_scale: 1.0: alpha scales the loss's soft margins, not logits of a softmax classifier.
        check_labels: check every call's label range (True; see `MetricLoss`).
    """

    def __init__(self, num_classes: int, embedding_dim: int, margin: float = 0.1, alpha: float = 32.0) -> None:
        super().__init__()
        if num_classes < 1 or embedding_dim < 1:
            raise ValueError(f"need num_classes >= 1 and embedding_dim >= 1, got {num_classes} and {embedding_dim}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0 (the paper uses 32), got {alpha}")
        if not margin >= 0:
            raise ValueError(f"margin must be >= 0 (the paper uses 0.1), got {margin}")
        self.loss = _PMLProxyAnchorLoss(num_classes, embedding_dim, margin=margin, alpha=alpha)

    @property
    def proxies(self) -> nn.Parameter:  # type: ignore[override]  # read-only: PML's module owns the parameter
        """The `(K, D)` proxies (state-dict key `loss.proxies`)."""
        return self.loss.proxies

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of raw embeddings `(B, D)` with class indices `(B,)` in `[0, K)`; returns a scalar."""
        num_classes = self.proxies.shape[0]
        if self.check_labels and labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
            raise ValueError(f"labels must lie in [0, {num_classes}); remap class ids to 0..K-1")
        with torch.autocast(embeddings.device.type, enabled=False):
            return self.loss(embeddings.float(), labels)
