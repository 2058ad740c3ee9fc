"""Supervised contrastive loss (Khosla et al., NeurIPS 2020), from pytorch-metric-learning; docs/losses.md section 5."""

from __future__ import annotations

from pytorch_metric_learning import losses

from retrieval.losses.pml_adapter import PMLPairLoss

__all__ = ["SupConLoss"]


class SupConLoss(PMLPairLoss):
    """SupCon: per anchor and positive, a softmax over the anchor's cosines / temperature to the rest of the batch.

    `L = mean over anchors i of -1/|P(i)| sum_{p in P(i)} log( exp(s_ip / t) / sum_{a != i} exp(s_ia / t) )`
    with s the cosine similarity (the "L_out" form of the paper). PML's `SupConLoss`, in float32.

    Args:
        temperature: t; the paper's default 0.1 (PML's too).

    Raises:
        ValueError: temperature not > 0.
    """

    def __init__(self, temperature: float = 0.1) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 (the paper uses 0.1), got {temperature}")
        super().__init__(losses.SupConLoss(temperature=temperature))
