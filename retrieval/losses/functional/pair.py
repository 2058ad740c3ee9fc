"""Pure functions behind the pair losses: B x B cosine and Euclidean matrices, Circle, triplet margin.

Similarities are cosines between L2-normalized embeddings, in [-1, 1]; distances are Euclidean
distances between the same unit vectors, in [0, 2]. Masks and mined indices come from
`retrieval.miners`. The matrices compare the batch with itself (B, B) or, with a cross-batch
memory, with the batch followed by the memory (B, B + M). No function here holds state or builds
a tensor larger than its inputs' matrix, except `triplet_margin_losses`, which is (T,) for T mined
triplets.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from retrieval.miners.masks import check_pairwise, pair_masks
from retrieval.miners.types import TripletIndices

__all__ = [
    "circle_loss",
    "cosine_similarity_matrix",
    "euclidean_distance_matrix",
    "mean_over_active",
    "reference_labels",
    "triplet_margin_losses",
]


def cosine_similarity_matrix(embeddings: Tensor, memory_embeddings: Tensor | None = None) -> Tensor:
    """Cosine similarity of every row with every row, from one matmul of the L2-normalized rows.

    Computed in float32 even under autocast (float64 input stays float64).

    Args:
        embeddings: raw embeddings (B, D); they are normalized here.
        memory_embeddings: raw embeddings of earlier batches (M, D) (a cross-batch memory), or None.

    Returns:
        Similarities (B, B); with a memory (B, B + M): the batch's rows against the batch, then the memory.

    Raises:
        ValueError: if `embeddings` or `memory_embeddings` is not 2-D.
    """
    for name, values in (("embeddings", embeddings), ("memory_embeddings", memory_embeddings)):
        if values is not None and values.ndim != 2:
            raise ValueError(
                f"{name} must be 2-D, shape (B, D); got {tuple(values.shape)}. "
                f"Flatten extra dimensions with {name}.flatten(1)."
            )
    dtype = torch.promote_types(embeddings.dtype, torch.float32)
    with torch.autocast(embeddings.device.type, enabled=False):
        unit = F.normalize(embeddings.to(dtype), dim=1)
        if memory_embeddings is None:
            return unit @ unit.T
        return unit @ torch.cat([unit, F.normalize(memory_embeddings.to(dtype), dim=1)]).T


def reference_labels(labels: Tensor, memory_embeddings: Tensor | None, memory_labels: Tensor | None) -> Tensor | None:
    """The labels of the columns of `cosine_similarity_matrix(embeddings, memory_embeddings)`, None without memory.

    Args:
        labels: class ids of the batch (B,).
        memory_embeddings: embeddings of earlier batches (M, D), or None.
        memory_labels: their class ids (M,), or None; given together with `memory_embeddings`.

    Returns:
        (B + M,) class ids, the batch's first; None when there is no memory.

    Raises:
        ValueError: if only one of `memory_embeddings` and `memory_labels` is given, or their lengths differ.
    """
    if memory_embeddings is None and memory_labels is None:
        return None
    if memory_embeddings is None or memory_labels is None or len(memory_embeddings) != len(memory_labels):
        raise ValueError("pass memory_embeddings (M, D) and memory_labels (M,) together, one label per embedding")
    return torch.cat([labels, memory_labels.to(labels.dtype)])


def euclidean_distance_matrix(similarities: Tensor) -> Tensor:
    """Euclidean distances between unit vectors from their cosines: sqrt(2 - 2 cos).

    Coincident points (cos = 1) get a distance of about 1e-19 and a zero gradient, the
    subgradient `torch.cdist` uses, instead of the infinite derivative of sqrt at 0.

    Args:
        similarities: cosine similarities (B, B).

    Returns:
        Distances (B, B) in [0, 2].
    """
    squared = (2.0 - 2.0 * similarities).clamp(min=torch.finfo(similarities.dtype).tiny)
    return squared.sqrt()


def circle_loss(
    similarities: Tensor, labels: Tensor, m: float = 0.25, gamma: float = 256.0, ref_labels: Tensor | None = None
) -> Tensor:
    """Circle Loss, per anchor, averaged over the anchors that have a positive and a negative.

    Sun et al. 2020, "Circle Loss: A Unified Perspective of Pair Similarity Optimization". For
    anchor i, with positives s_p and negatives s_n among the other rows of the batch:

        alpha_p = relu(1 + m - s_p)  (detached)     delta_p = 1 - m
        alpha_n = relu(s_n + m)      (detached)     delta_n = m
        L_i = softplus(logsumexp(-gamma * alpha_p * (s_p - delta_p)) + logsumexp(gamma * alpha_n * (s_n - delta_n)))

    Equal to pytorch-metric-learning's `CircleLoss(m, gamma)` (which averages over anchors with a
    nonzero loss; with finite gamma and cosines a valid anchor's loss underflows to 0 only
    beyond gamma ~ 3000 in float32).

    Args:
        similarities: raw cosines (B, B), not pre-scaled: gamma is the scale; or (B, B + M) from
            the batch to itself and a cross-batch memory (`cosine_similarity_matrix`).
        labels: class ids (B,).
        m: relaxation margin; the paper uses 0.25 (face, retrieval) and 0.4 (fine-grained).
        gamma: scale; the paper uses 256 (80 is common too).
        ref_labels: class ids of the columns (B + M,) (`reference_labels`); None: the columns are the batch.

    Returns:
        Scalar loss; 0, still connected to the graph, when no anchor has both a positive and a negative.

    Raises:
        ValueError: if the shapes do not match.
    """
    check_pairwise(similarities, labels, "similarities", ref_labels)
    masks = pair_masks(labels, ref_labels)
    detached = similarities.detach()
    positive_logits = -gamma * F.relu(1.0 + m - detached) * (similarities - (1.0 - m))
    negative_logits = gamma * F.relu(detached + m) * (similarities - m)
    # A finite floor, not -inf: rows with no positive (or negative) must keep a finite gradient.
    floor = torch.finfo(similarities.dtype).min
    positive_term = positive_logits.masked_fill(~masks.positive, floor).logsumexp(dim=1)
    negative_term = negative_logits.masked_fill(~masks.negative, floor).logsumexp(dim=1)
    valid = masks.valid_anchors
    per_anchor = torch.where(valid, F.softplus(positive_term + negative_term), 0.0)
    return per_anchor.sum() / valid.sum().clamp(min=1)


def triplet_margin_losses(distances: Tensor, triplets: TripletIndices, margin: float = 0.2) -> Tensor:
    """Hinge loss of each triplet: [d(a, p) - d(a, n) + margin]_+.

    Args:
        distances: Euclidean distances between L2-normalized embeddings (B, B), or from the batch
            to itself and a cross-batch memory (B, B + M).
        triplets: mined (anchor, positive, negative) indices, each (T,): anchors index rows, the
            others columns of `distances`.
        margin: required gap between d(a, n) and d(a, p); default 0.2.

    Returns:
        Per-triplet losses (T,); reduce them with `mean_over_active`.
    """
    anchor, positive, negative = triplets
    return F.relu(distances[anchor, positive] - distances[anchor, negative] + margin)


def mean_over_active(losses: Tensor) -> Tensor:
    """Mean over the entries that are > 0, the reduction of pytorch-metric-learning's triplet loss.

    Args:
        losses: per-element losses (T,), T may be 0.

    Returns:
        Scalar; 0, still connected to the graph, when no entry is > 0.
    """
    return losses.sum() / (losses > 0).sum().clamp(min=1)
