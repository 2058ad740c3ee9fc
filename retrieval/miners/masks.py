"""Label masks of a batch and the shape check shared by miners and pair losses."""

from torch import Tensor

from retrieval.miners.types import PairMasks

__all__ = ["check_pairwise", "pair_masks"]


def pair_masks(labels: Tensor) -> PairMasks:
    """Positive and negative pair masks of a batch.

    Args:
        labels: class ids (B,).

    Returns:
        `PairMasks` of two (B, B) bool tensors; self-pairs are neither positive nor negative.
    """
    same = labels[:, None] == labels[None, :]
    negative = ~same
    return PairMasks(positive=same.fill_diagonal_(False), negative=negative)


def check_pairwise(matrix: Tensor, labels: Tensor, name: str) -> None:
    """Raise unless `labels` is (B,) and `matrix` is the matching (B, B) pairwise matrix.

    Args:
        matrix: a pairwise similarity or distance matrix, expected (B, B).
        labels: class ids, expected (B,).
        name: what `matrix` holds, for the error message ("similarities", "distances").

    Raises:
        ValueError: on any other shape.
    """
    if labels.ndim != 1:
        raise ValueError(
            f"labels must be 1-D with one class id per embedding, shape (B,); got {tuple(labels.shape)}. "
            "Flatten them with labels.view(-1)."
        )
    size = labels.shape[0]
    if matrix.shape != (size, size):
        raise ValueError(
            f"{name} must be ({size}, {size}) for {size} labels; got {tuple(matrix.shape)}. "
            "Pass exactly one label per embedding of the batch."
        )
