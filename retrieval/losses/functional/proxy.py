"""Proxy-softmax pieces: cosine logits to proxies and the semantic difficulty of the Anchor Loss.

All functions compute in float32 whatever the input dtype, so that a loss called under bf16
autocast still gets float32 logits (docs/losses.md, "Notation and shared conventions").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DIFFICULTIES", "cosine_to_proxies", "semantic_difficulty"]

# How the other classes' clipped cosines become one confusion value in [0, 1]: their L2 norm over
# sqrt(K - 1) (the spec's form), or the largest of them (the nearest other class).
DIFFICULTIES = ("norm", "max")


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


def semantic_difficulty(cosine: Tensor, labels: Tensor, form: str = "norm") -> Tensor:
    """Semantic difficulty `c_i = 1 + ||ReLU(cos_i, j != y_i)||_2 / sqrt(K - 1)` (docs/losses.md, Anchor Loss).

    The target cosine is masked out (it signals belonging, not confusion) and negative cosines
    are clipped (the far side of the sphere is no confusion). The `1 / sqrt(K - 1)` keeps c_i
    in `[1, 2]` and near 1 whatever K is, so the base scale transfers across datasets.
    `form="max"` takes the nearest other class instead, `c_i = 1 + max_j ReLU(cos_ij), j != y_i`:
    also in `[1, 2]`, but not diluted by the many far classes of a large K.

    Args:
        cosine: `(B, K)` cosines of each sample to every class proxy.
        labels: `(B,)` target class index of each sample, in `[0, K)`.
        form: `"norm"` (the spec's) or `"max"`.

    Returns:
        `(B,)` c_i, exactly 1 when K = 1 (no other class can be confused with).

    Raises:
        ValueError: for a form other than those in `DIFFICULTIES`.
    """
    if form not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {', '.join(DIFFICULTIES)}, got {form!r}")
    num_classes = cosine.shape[1]
    if num_classes == 1:
        return torch.ones(cosine.shape[0], dtype=cosine.dtype, device=cosine.device)
    confusion = cosine.clamp(min=0).scatter(1, labels.view(-1, 1), 0.0)
    if form == "max":
        return 1.0 + confusion.amax(dim=1)
    return 1.0 + torch.linalg.vector_norm(confusion, dim=1) / math.sqrt(num_classes - 1)
