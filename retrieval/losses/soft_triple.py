"""SoftTriple (Qian et al., ICCV 2019), from pytorch-metric-learning; docs/losses.md section 5."""

from __future__ import annotations

from pytorch_metric_learning import losses

from retrieval.losses.pml_adapter import PMLLoss

__all__ = ["SoftTripleLoss"]


class SoftTripleLoss(PMLLoss):
    """SoftTriple: a softmax over classes, each class a soft maximum over its `centers_per_class` centres.

    Per class c, `S_c = sum_k softmax_k(S_ck / gamma) S_ck` over the cosines S_ck to its centres; then
    the loss is cross-entropy of `la * (S_c - margin [c = y])`. The centres, a `(D, K * centers_per_class)`
    parameter of PML's module, train with the proxy learning rate and no weight decay. PML's
    `SoftTripleLoss` (without the paper's centre-merging regularizer), in float32.

    Args:
        num_classes: K.
        embedding_dim: D.
        centers_per_class: 10, the paper's K.
        la: 20, the paper's lambda (scale of the class logits).
        gamma: 0.1, the paper's temperature of the soft assignment to centres.
        margin: 0.01, the paper's delta.

    Raises:
        ValueError: a count below 1 or a scale, temperature or margin out of range.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        centers_per_class: int = 10,
        la: float = 20.0,
        gamma: float = 0.1,
        margin: float = 0.01,
    ) -> None:
        if num_classes < 1 or embedding_dim < 1 or centers_per_class < 1:
            raise ValueError(
                f"need num_classes, embedding_dim and centers_per_class >= 1, got {num_classes}, {embedding_dim}, "
                f"{centers_per_class}"
            )
        if not (la > 0 and gamma > 0 and margin >= 0):
            raise ValueError(f"need la > 0, gamma > 0, margin >= 0 (paper: 20, 0.1, 0.01), got {la}, {gamma}, {margin}")
        loss = losses.SoftTripleLoss(
            num_classes, embedding_dim, centers_per_class=centers_per_class, la=la, gamma=gamma, margin=margin
        )
        super().__init__(loss, num_classes=num_classes)
