"""`PairModel`: does a query image match a result image? One logit a pair, from the checkpoint's own backbone.

Two parts, so that each image goes through the backbone once however many pairs it is in:

- `PairModel.describe` (`Describer`): the backbone (a copy of the trained `Embedder`'s) -> its feature map,
  average-pooled over a `grid` x `grid` layout of cells (which part of the image holds what) and over the
  whole image as the embedder pools it -> Linear -> LayerNorm: a `(B, P)` descriptor.
- `PairModel.head` (`PairHead`): the product and the absolute difference of the two descriptors, cell by
  cell, and the cosine of the two images' embeddings (the trained embedder's, which the blend uses) ->
  MLP -> one logit.

Why this head rather than cross-attention over the two feature maps (STIR, Shtrom et al. 2023): a query
costs one backbone pass for itself and one for each result whose descriptor is not cached, and the N pairs
then cost one small MLP batch; cross-attention pays its attention layers for every pair. The cell-wise
product and difference still see where two images differ, which a single pooled vector averages away.
The head is symmetric in its two images.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from retrieval.models.embedder import Embedder

__all__ = ["Describer", "PairHead", "PairModel", "Pooled"]


class Describer(nn.Module):
    """Images `(B, C, H, W)` -> descriptors `(B, P)`: the embedder's backbone, pooled whole and by cells."""

    def __init__(self, embedder: Embedder, width: int, grid: int, in_chans: int, image_size: int) -> None:
        super().__init__()
        self.embedder = embedder
        self.grid = grid
        probe = torch.zeros(2, in_chans, image_size, image_size, device=next(embedder.parameters()).device)
        with torch.no_grad():
            training = embedder.training
            features = self._pooled(embedder.eval(), probe)
            embedder.train(training)
        # pooled features -> descriptor: what trains alone when the backbone is frozen (`reranker.backbone`)
        self.projection = nn.Sequential(nn.Linear(features.shape[1], width), nn.LayerNorm(width))

    def forward(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> `(B, P)` float32 descriptors."""
        return self.projection(self.pooled(images).float())

    def pooled(self, images: Tensor) -> Tensor:
        """`(B, C, H, W)` -> `(B, F)` the backbone's features, pooled whole and by cell: the projection's input."""
        return self._pooled(self.embedder, images)

    def _pooled(self, embedder: Embedder, images: Tensor) -> Tensor:
        """The backbone's features pooled as the embedder pools them, then (feature maps only) by grid cell."""
        backbone = embedder.backbone
        maps = backbone.forward_features(images) if embedder.timm_backbone else backbone(images)  # type: ignore[operator]
        pooled = embedder.pool_features(maps)
        if maps.ndim != 4:  # tokens or already pooled features: no layout to keep
            return pooled
        if embedder.channels_last_features:
            maps = maps.permute(0, 3, 1, 2)
        cells = F.adaptive_avg_pool2d(maps, self.grid).flatten(1)
        return torch.cat([pooled, cells], dim=1)


class PairHead(nn.Module):
    """Descriptors of query and result `(M, P)` each, their embeddings' cosine `(M,)` -> logits `(M,)`."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * width + 1, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, queries: Tensor, results: Tensor, cosines: Tensor) -> Tensor:
        """One logit a pair: positive when the model takes the two images to match."""
        pair = torch.cat([queries * results, (queries - results).abs(), cosines[:, None].to(queries.dtype)], dim=1)
        logits: Tensor = self.mlp(pair)[:, 0]
        return logits


class Pooled(nn.Module):
    """A describer's `pooled` features as a module's output (to embed a dataset's images with them once)."""

    def __init__(self, describer: Describer) -> None:
        super().__init__()
        self.describer = describer

    def forward(self, images: Tensor) -> Tensor:
        return self.describer.pooled(images).float()


class PairModel(nn.Module):
    """The pair model: a `Describer` started from a trained embedder's weights and a `PairHead`.

    Args:
        embedder: the checkpoint's embedder; it is copied, never changed.
        width: P, the descriptor's width.
        grid: cells a side of the descriptor's layout.
        in_chans, image_size: the images it takes (to measure the backbone's feature width).
    """

    def __init__(self, embedder: Embedder, width: int, grid: int, in_chans: int, image_size: int) -> None:
        super().__init__()
        self.describe = Describer(copy.deepcopy(embedder), width, grid, in_chans, image_size)
        self.head = PairHead(width)
        self.width, self.grid = width, grid

    def forward(self, queries: Tensor, results: Tensor, cosines: Tensor) -> Tensor:
        """Logits `(M,)` of image pairs: query images and result images `(M, C, H, W)` each, cosines `(M,)`."""
        described = self.describe(torch.cat([queries, results]))
        return self.head(described[: len(queries)], described[len(queries) :], cosines)
