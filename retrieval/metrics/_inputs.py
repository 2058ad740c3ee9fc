"""Turn user arrays (numpy or torch) into the validated numpy arrays the metrics work on.

Every check raises `UserError` with a message that says what is wrong and how to fix it. torch is
not imported here: a tensor exists only once its caller has imported torch, so the metrics run in
an install without it (`retrieval audit --model`, the `[serve,audit]` extras).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from numbers import Integral
from typing import TYPE_CHECKING, Any, TypeGuard, Union

import numpy as np

from retrieval.errors import UserError

if TYPE_CHECKING:
    import torch

__all__ = ["ArrayLike", "as_class_codes", "as_embeddings", "as_ks", "as_label_codes", "as_mask"]

ArrayLike = Union[np.ndarray, "torch.Tensor"]  # noqa: UP007 (a string member: torch is imported for mypy only)


def _is_tensor(array: Any) -> TypeGuard[torch.Tensor]:
    """Whether `array` is a torch tensor (none can be while torch is not imported)."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and isinstance(array, torch_module.Tensor)


def _to_numpy(array: ArrayLike) -> np.ndarray:
    """A numpy view or copy of `array`; torch tensors are detached and moved to the CPU."""
    if _is_tensor(array):
        return array.detach().cpu().numpy()
    return np.asarray(array)


def as_embeddings(embeddings: ArrayLike) -> np.ndarray:
    """Validate embeddings and return them as a C-contiguous float32 matrix.

    Args:
        embeddings: (N, D) floating-point vectors; torch tensors of any float dtype (bf16 too).

    Returns:
        (N, D) float32 C-contiguous array, the layout FAISS searches without a copy.

    Raises:
        UserError: if the array is not 2-D, is empty, or holds NaN/inf.
    """
    if _is_tensor(embeddings):
        embeddings = embeddings.detach().to(device="cpu", dtype=sys.modules["torch"].float32)
    matrix = np.ascontiguousarray(_to_numpy(embeddings), dtype=np.float32)
    if matrix.ndim != 2 or matrix.size == 0:
        raise UserError(
            f"embeddings must be a non-empty 2-D (N, D) array, got shape {matrix.shape}; "
            "stack one embedding vector per image into one matrix"
        )
    if not np.isfinite(matrix).all():
        raise UserError("embeddings contain NaN or inf; check the model's outputs (did training diverge?)")
    return matrix


def as_class_codes(labels: ArrayLike, num_items: int) -> np.ndarray:
    """Validate integer class labels and recode them as dense class indices.

    Args:
        labels: (N,) integer class ids, any values (negative, sparse, large).
        num_items: N, the number of embedding rows.

    Returns:
        (N,) int32 codes in [0, C): equal codes iff equal labels.

    Raises:
        UserError: if the labels are not a 1-D integer array of length N.
    """
    labels = _to_numpy(labels)
    if labels.shape != (num_items,):
        raise UserError(f"labels must have shape ({num_items},), one class id per embedding row, got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise UserError(
            f"labels must be integers, got dtype {labels.dtype}; map class names to ids first, "
            "e.g. np.unique(names, return_inverse=True)[1]"
        )
    return np.unique(labels, return_inverse=True)[1].astype(np.int32)


def as_label_codes(labels: ArrayLike, num_items: int) -> np.ndarray:
    """Class codes of single-label data, or packed label sets of multi-label data.

    Args:
        labels: (N,) integer class ids, or (N, C) multi-hot rows (bool or 0/1 integers) where an
            item may carry several labels.

    Returns:
        (N,) int32 codes as `as_class_codes`, or (N, ceil(C / 8)) uint8 bit-packed label sets:
        two items share a label iff the bitwise AND of their rows is nonzero.

    Raises:
        UserError: if the labels are neither.
    """
    array = _to_numpy(labels)
    if array.ndim != 2:
        return as_class_codes(array, num_items)
    if array.shape[0] != num_items or array.shape[1] == 0:
        raise UserError(f"multi-hot labels must have shape ({num_items}, C), one row per embedding, got {array.shape}")
    if not (array.dtype == np.bool_ or (np.issubdtype(array.dtype, np.integer) and np.isin(array, (0, 1)).all())):
        raise UserError(f"multi-hot labels must be bool or 0/1 integers, got dtype {array.dtype}")
    return np.packbits(array.astype(bool), axis=1)


def as_mask(mask: ArrayLike | None, num_items: int, name: str) -> np.ndarray:
    """Validate a boolean row selection; None selects every row.

    Args:
        mask: (N,) booleans, or None for all rows.
        num_items: N, the number of embedding rows.
        name: the argument's name, for error messages.

    Returns:
        (N,) bool array with at least one True.

    Raises:
        UserError: if the mask is not boolean, has the wrong length, or selects nothing.
    """
    if mask is None:
        return np.ones(num_items, dtype=bool)
    mask = _to_numpy(mask)
    if mask.dtype != np.bool_ or mask.shape != (num_items,):
        raise UserError(
            f"{name} must be a boolean array of shape ({num_items},), got {mask.dtype} {mask.shape}; "
            "pass one True/False per embedding row, not row indices"
        )
    if not mask.any():
        raise UserError(f"{name} selects no rows; mark at least one row True, or pass None to use every row")
    return mask


def as_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """Validate the K values of Recall@K.

    Args:
        ks: positive integers, e.g. (1, 2, 4, 8).

    Returns:
        The same values as a tuple of python ints.

    Raises:
        UserError: if `ks` is empty or holds anything but positive integers.
    """
    ks = tuple(ks)
    if not ks or not all(isinstance(k, Integral) and not isinstance(k, bool) and k > 0 for k in ks):
        raise UserError(f"ks must be positive integers such as (1, 2, 4, 8), got {ks}")
    return tuple(int(k) for k in ks)
