"""Clustered unit vectors that look like a trained embedder's output, for tests and benchmarks.

A trained metric-learning embedder maps each class to a tight cone on the unit sphere, and the
spread inside a class is not isotropic: a few directions carry most of the variance. The
generator mimics both: random class centres, within-class noise with a power-law spectrum in a
random orientation, then L2 normalization.
"""

from __future__ import annotations

import numpy as np

__all__ = ["clustered_unit_vectors"]


def clustered_unit_vectors(
    n: int,
    dim: int = 128,
    n_clusters: int = 1000,
    spread: float = 0.8,
    seed: int = 0,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw `n` L2-normalized vectors around `n_clusters` random centres.

    Args:
        n: number of vectors.
        dim: their dimension.
        n_clusters: number of classes; each vector picks one uniformly at random.
        spread: norm of the expected within-class noise relative to the (unit) centre; 0.8 gives
            a within-class cosine around 0.8, close to a trained embedder on held-out classes.
        seed: seed of the generator, so tests and benchmarks are reproducible.
        out: an `(n, dim)` float32 array to fill (e.g. a `np.memmap` on disk, for more rows than
            fit in memory); it is filled 65,536 rows at a time and returned.

    Returns:
        `(embeddings, labels)`: `(n, dim)` float32 unit rows and `(n,)` int64 class ids.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    spectrum = (1.0 + np.arange(dim)) ** -0.5
    spectrum *= spread / np.sqrt(np.sum(spectrum**2))
    labels = rng.integers(0, n_clusters, size=n)
    embeddings = np.empty((n, dim), dtype=np.float32) if out is None else out
    for start in range(0, n, 65536):  # bounded temporaries for 1M rows
        stop = min(start + 65536, n)
        noise = (rng.standard_normal((stop - start, dim)) * spectrum) @ rotation.T
        block = centres[labels[start:stop]] + noise.astype(np.float32)
        embeddings[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return embeddings, labels.astype(np.int64)
