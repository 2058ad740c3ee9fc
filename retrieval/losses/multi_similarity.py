"""Multi-Similarity loss and miner (Wang et al., CVPR 2019), from pytorch-metric-learning; docs/losses.md section 5."""

from __future__ import annotations

from pytorch_metric_learning import losses, miners

from retrieval.losses.pml_adapter import PMLPairLoss

__all__ = ["MultiSimilarityLoss"]


class MultiSimilarityLoss(PMLPairLoss):
    """Multi-Similarity: per anchor, soft-weighted positives and negatives around a similarity threshold.

    `1/B sum_i [ 1/alpha log(1 + sum_{p} exp(-alpha (S_ip - base))) + 1/beta log(1 + sum_{n} exp(beta (S_in - base))) ]`
    over cosine similarities S, after `MultiSimilarityMiner` keeps the negatives more similar than the
    anchor's least similar positive minus epsilon and the positives less similar than its most
    similar negative plus epsilon. PML's `MultiSimilarityLoss` and `MultiSimilarityMiner`, in float32.

    Args:
        alpha: scale of the positive terms; paper default 2.
        beta: scale of the negative terms; paper default 50.
        base: similarity threshold lambda; 0.5 as in the authors' code and PML (the paper's text says 1).
        epsilon: the miner's margin; paper default 0.1.

    Raises:
        ValueError: alpha or beta not > 0, or epsilon < 0.
    """

    def __init__(self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5, epsilon: float = 0.1) -> None:
        if not (alpha > 0 and beta > 0):
            raise ValueError(f"alpha and beta must be > 0 (the paper uses 2 and 50), got {alpha} and {beta}")
        if not epsilon >= 0:
            raise ValueError(f"epsilon must be >= 0 (the paper uses 0.1), got {epsilon}")
        super().__init__(
            losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=base), miners.MultiSimilarityMiner(epsilon=epsilon)
        )
