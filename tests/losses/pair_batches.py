"""Batches shared by the pair-loss tests: label layouts and reproducible raw embeddings."""

import math

import torch

LABEL_SETS = {
    "pk": [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
    "uneven": [0, 1, 0, 2, 2, 1, 3, 0, 4, 4, 4, 5],  # 3 and 5 have no positive
}


def make_embeddings(seed: int, size: int, dtype: torch.dtype) -> torch.Tensor:
    """`(size, 16)` raw (unnormalized) embeddings that require grad."""
    generator = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(size, 16, generator=generator, dtype=dtype)).requires_grad_(True)


def unit_rows(embeddings: torch.Tensor) -> list[list[float]]:
    """The rows L2-normalized in plain Python floats, for naive reference loops."""
    rows = embeddings.double().tolist()
    return [[v / math.sqrt(sum(w * w for w in row)) for v in row] for row in rows]
