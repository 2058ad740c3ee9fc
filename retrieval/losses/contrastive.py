"""Contrastive loss with a pair-margin miner (Hadsell et al., CVPR 2006), from pytorch-metric-learning; docs/losses.md
section 5."""

from __future__ import annotations

from pytorch_metric_learning import losses, miners

from retrieval.losses.pml_adapter import PMLPairLoss

__all__ = ["ContrastiveLoss"]


class ContrastiveLoss(PMLPairLoss):
    """Contrastive: pull positive pairs within `pos_margin`, push negative pairs beyond `neg_margin`.

    On the Euclidean distance d of unit embeddings (in [0, 2]): `[d - pos_margin]_+` for a
    positive pair, `[neg_margin - d]_+` for a negative one, each averaged over its pairs with a loss
    > 0, then summed. `PairMarginMiner` first keeps the positives farther than `miner_pos_margin`
    and the negatives closer than `miner_neg_margin`, the hard pairs. PML's `ContrastiveLoss` and
    `PairMarginMiner`, in float32.

    Args:
        pos_margin: 0, PML's default: positives are pulled together until they coincide.
        neg_margin: 1, the margin of Hadsell et al. and PML's default.
        miner_pos_margin: 0.2, PML's `PairMarginMiner` default.
        miner_neg_margin: 0.8, PML's `PairMarginMiner` default.

    Raises:
        ValueError: a negative margin, or pos_margin >= neg_margin.
    """

    def __init__(
        self,
        pos_margin: float = 0.0,
        neg_margin: float = 1.0,
        miner_pos_margin: float = 0.2,
        miner_neg_margin: float = 0.8,
    ) -> None:
        if not 0 <= pos_margin < neg_margin:
            raise ValueError(f"need 0 <= pos_margin < neg_margin (defaults 0 and 1), got {pos_margin} and {neg_margin}")
        if not (miner_pos_margin >= 0 and miner_neg_margin >= 0):
            raise ValueError(
                f"miner margins must be >= 0 (defaults 0.2, 0.8), got {miner_pos_margin}, {miner_neg_margin}"
            )
        super().__init__(
            losses.ContrastiveLoss(pos_margin=pos_margin, neg_margin=neg_margin),
            miners.PairMarginMiner(pos_margin=miner_pos_margin, neg_margin=miner_neg_margin),
        )
