"""Label masks of a batch and the shape check shared by miners and pair losses."""

from torch import Tensor

from retrieval.miners.types import PairMasks

__all__ = ["check_pairwise", "pair_masks"]


def pair_masks(labels: Tensor, ref_labels: Tensor | None = None) -> PairMasks:
    """Positive and negative pair masks of a batch against its references.

    Args:
        labels: class ids of the batch (B,).
        ref_labels: class ids of the references (N,), N >= B, whose first B are the batch itself
            (a cross-batch memory appends earlier batches); None: the batch alone.

    Returns:
        `PairMasks` of two (B, N) bool tensors; self-pairs (i, i) are neither positive nor negative.
    """
    references = labels if ref_labels is None else ref_labels
    same = labels[:, None] == references[None, :]
    negative = ~same
    return PairMasks(positive=same.fill_diagonal_(False), negative=negative)


def check_pairwise(matrix: Tensor, labels: Tensor, name: str, ref_labels: Tensor | None = None) -> None:
    """Raise unless `labels` is (B,) and `matrix` is the matching (B, N) pairwise matrix.

    Args:
        matrix: a pairwise similarity or distance matrix, expected (B, B), or (B, N) against references.
        labels: class ids, expected (B,).
        name: what `matrix` holds, for the error message ("similarities", "distances").
        ref_labels: class ids of the references (N,), N >= B, the batch first; None: the batch alone.

    Raises:
        ValueError: on any other shape.
    """
    for what, values in (("labels", labels), ("ref_labels", ref_labels)):
        if values is not None and values.ndim != 1:
            raise ValueError(
                f"{what} must be 1-D with one class id per embedding, shape (B,); got {tuple(values.shape)}. "
                f"Flatten them with {what}.view(-1)."
            )
    size = labels.shape[0]
    columns = size if ref_labels is None else ref_labels.shape[0]
    if columns < size:
        raise ValueError(f"the {columns} references must start with the batch's {size} embeddings")
    if matrix.shape != (size, columns):
        raise ValueError(
            f"{name} must be ({size}, {columns}) for {size} labels and {columns} references; got "
            f"{tuple(matrix.shape)}. Pass exactly one label per embedding of the batch."
        )
