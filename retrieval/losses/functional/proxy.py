"""Proxy-softmax pieces: cosine logits to proxies, semantic difficulty, weighted cross-entropy.

All functions compute in float32 whatever the input dtype, so that a loss called under bf16
autocast still gets float32 logits (losses.md, "All proxy losses compute logits in float32").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["cosine_to_proxies", "semantic_difficulty", "weighted_cross_entropy"]


def cosine_to_proxies(embeddings: Tensor, proxies: Tensor) -> Tensor:
    """Cosine similarity of every embedding to every proxy, in float32.

    Args:
        embeddings: `(B, D)` raw embeddings (normalized here).
        proxies: `(K, D)` raw proxies (normalized here).

    Returns:
        `(B, K)` float32 cosines `cos_ij = f_i . P_j`.
    """
    with torch.autocast(device_type=embeddings.device.type, enabled=False):
        features = F.normalize(embeddings.float(), dim=1)
        anchors = F.normalize(proxies.float(), dim=1)
        return features @ anchors.T


def semantic_difficulty(cosine: Tensor, labels: Tensor) -> Tensor:
    """Semantic difficulty `c_i = 1 + ||ReLU(cos_i, j != y_i)||_2 / sqrt(K - 1)` (losses.md, Anchor Loss).

    The target cosine is masked out (it signals belonging, not confusion) and negative cosines
    are clipped (the far side of the sphere is no confusion). The `1 / sqrt(K - 1)` keeps c_i
    in `[1, 2]` and near 1 whatever K is, so the base scale transfers across datasets.

    Args:
        cosine: `(B, K)` cosines of each sample to every class proxy.
        labels: `(B,)` target class index of each sample, in `[0, K)`.

    Returns:
        `(B,)` c_i, exactly 1 when K = 1 (no other class can be confused with).
    """
    num_classes = cosine.shape[1]
    if num_classes == 1:
        return torch.ones(cosine.shape[0], dtype=cosine.dtype, device=cosine.device)
    confusion = cosine.clamp(min=0).scatter(1, labels.view(-1, 1), 0.0)
    return 1.0 + torch.linalg.vector_norm(confusion, dim=1) / math.sqrt(num_classes - 1)


def weighted_cross_entropy(
    logits: Tensor, labels: Tensor, weights: Tensor | None = None, class_weights: Tensor | None = None
) -> Tensor:
    """Mean over the batch of `w_i * a_{y_i} * CE(logits_i, y_i)`, full softmax with the target in the denominator.

    The mean divides by the batch size B, not by the sum of the weights (unlike
    `F.cross_entropy(weight=...)`), so a class weight changes how much a sample counts, not the
    loss of the other samples in the batch.

    Args:
        logits: `(B, K)` logits (cast to float32).
        labels: `(B,)` target class indices.
        weights: optional `(B,)` per-sample weights; samples weighted 0 still count in the mean.
        class_weights: optional `(K,)` per-class weights a_c (e.g. `retrieval.losses.class_weights`).

    Returns:
        Scalar loss.
    """
    per_sample = F.cross_entropy(logits.float(), labels, reduction="none")
    if weights is not None:
        per_sample = per_sample * weights
    if class_weights is not None:
        per_sample = per_sample * class_weights[labels]
    return per_sample.mean()
