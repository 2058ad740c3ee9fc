"""The built-in self-supervised objectives of `pretrain.method`: a head on the backbone's pooled features, a loss.

Each is a builder of the registry `retrieval.choices.pretrain_methods.PRETRAIN_METHODS`. Both take a
batch of `2B` views whose rows `i` and `B + i` are two augmentations of one image, and
the image's dataset index as its label (so the two views share a label, and no two images do,
on every rank of a torchrun run):

- `simclr` (Chen et al., 2020): a 2-layer MLP projection and the NT-Xent loss of
  pytorch-metric-learning (`NTXentLoss`), in which each view's positive is its twin and the other
  `2B - 2` views of the batch are its negatives. Under torchrun the projections of all ranks are
  gathered first, so the negatives are the global batch's.
- `simsiam` (Chen & He, 2021): a 3-layer projection, a 2-layer predictor, and the negative cosine
  between one view's prediction and the other view's projection with its gradient stopped,
  symmetrized. No negatives, so it needs no large batch; it can collapse, which the loss shows as
  -1 from the first epochs on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import NTXentLoss
from torch import Tensor, nn

from retrieval.choices.pretrain_methods import PRETRAIN_METHODS
from retrieval.config import PretrainConfig
from retrieval.models import Embedder
from retrieval.runtime.distributed import all_gather_keep_local

__all__ = ["SelfSupervisedModel", "SimCLRLoss", "SimSiamLoss", "build_method", "simclr", "simsiam"]


class SelfSupervisedModel(nn.Module):
    """images `(2B, C, H, W)` -> head outputs `(2B, H)`: the embedder's backbone and pooling, then the method's head.

    Args:
        encoder: an `Embedder` without a Linear head (`embedding_dim=None`): its `backbone` is what
            pretraining writes out.
        head: the method's projection (and predictor) on the pooled features.
    """

    def __init__(self, encoder: Embedder, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    @property
    def backbone(self) -> nn.Module:
        """The timm backbone whose weights `retrieval train --set model.weights=FILE` loads."""
        return self.encoder.backbone

    def forward(self, images: Tensor) -> Tensor:
        """`(2B, C, H, W)` views -> `(2B, H)` head outputs (float32)."""
        output: Tensor = self.head(self.encoder.features(images))
        return output.float()


class SimCLRLoss(nn.Module):
    """NT-Xent (pytorch-metric-learning's `NTXentLoss`) over the views of the global batch.

    Args:
        temperature: the softmax temperature of the cosine similarities (> 0).
    """

    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.loss = NTXentLoss(temperature=temperature)

    def forward(self, projections: Tensor, labels: Tensor) -> Tensor:
        """`projections (2B, P)` of this rank; `labels (2B,)` the image index of each view."""
        loss: Tensor = self.loss(all_gather_keep_local(projections.float()), all_gather_keep_local(labels))
        return loss


class SimSiamLoss(nn.Module):
    """SimSiam's symmetrized negative cosine between each view's prediction and its twin's stopped projection.

    Args:
        projection_dim: width `P` of the projection; the head's output is `[projection, prediction]`, `(2B, 2P)`.
    """

    def __init__(self, projection_dim: int) -> None:
        super().__init__()
        self.projection_dim = projection_dim

    def forward(self, outputs: Tensor, labels: Tensor) -> Tensor:
        """`outputs (2B, 2P)`: rows `i` and `B + i` are the two views of one image; `labels` are not needed."""
        z, p = outputs.float().split(self.projection_dim, dim=1)
        z1, z2 = z.chunk(2)
        p1, p2 = p.chunk(2)
        similarity = F.cosine_similarity(p1, z2.detach(), dim=1) + F.cosine_similarity(p2, z1.detach(), dim=1)
        return -0.5 * similarity.mean()


class _ProjectAndPredict(nn.Module):
    """SimSiam's head: `[z, predictor(z)]`, so one tensor carries both to the loss."""

    def __init__(self, projector: nn.Module, predictor: nn.Module) -> None:
        super().__init__()
        self.projector = projector
        self.predictor = predictor

    def forward(self, features: Tensor) -> Tensor:
        z = self.projector(features)
        return torch.cat([z, self.predictor(z)], dim=1)


def build_method(pretrain: PretrainConfig, feature_width: int) -> tuple[nn.Module, nn.Module]:
    """(head, loss) of `pretrain.method` (a name of `PRETRAIN_METHODS`) on pooled features of width `feature_width`.

    Raises:
        UserError: an unknown method (the config refuses it first), or its entry point fails to load.
    """
    head, loss = PRETRAIN_METHODS.get(pretrain.method)(pretrain, feature_width)
    return head, loss


def simclr(pretrain: PretrainConfig, feature_width: int) -> tuple[nn.Module, nn.Module]:
    """SimCLR: a 2-layer MLP projection to `pretrain.projection_dim` and NT-Xent at `pretrain.temperature`."""
    hidden, out = pretrain.hidden_dim, pretrain.projection_dim
    head = nn.Sequential(
        nn.Linear(feature_width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out)
    )
    return head, SimCLRLoss(pretrain.temperature)


def simsiam(pretrain: PretrainConfig, feature_width: int) -> tuple[nn.Module, nn.Module]:
    """SimSiam: a 3-layer projection, a bottleneck predictor (a quarter of the width) and the stop-gradient loss."""
    hidden, out = pretrain.hidden_dim, pretrain.projection_dim
    projector = nn.Sequential(
        nn.Linear(feature_width, hidden, bias=False),
        nn.BatchNorm1d(hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, hidden, bias=False),
        nn.BatchNorm1d(hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, out, bias=False),
        nn.BatchNorm1d(out, affine=False),
    )
    bottleneck = max(out // 4, 1)
    predictor = nn.Sequential(
        nn.Linear(out, bottleneck, bias=False),
        nn.BatchNorm1d(bottleneck),
        nn.ReLU(inplace=True),
        nn.Linear(bottleneck, out),
    )
    return _ProjectAndPredict(projector, predictor), SimSiamLoss(out)
