"""Synthetic catalogues with planted faults: embeddings whose copies, leaks, wrong labels and outliers are known."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from retrieval.audit.catalogue import Catalogue
from retrieval.config import AUDIT_CHECKS

NO_HASH = [check for check in AUDIT_CHECKS if check != "exact_duplicates"]  # audit.checks without reading files


@dataclass(frozen=True)
class Planted:
    """A catalogue, its `(N, D)` unit embeddings and the rows of each planted fault."""

    catalogue: Catalogue
    embeddings: np.ndarray
    copies: tuple[int, int]  # (train row, its copy in test): a near-duplicate and a leak
    flipped: np.ndarray  # rows whose label was changed to another class
    outlier: int  # a row far from everything
    true_labels: list[str]


def planted_catalogue(folder: Path, classes: int = 4, per_class: int = 30, dim: int = 16, seed: int = 0) -> Planted:
    """Tight clusters (one per class, 2/3 train, 1/3 test), one train image copied into test, 3 labels flipped,
    one outlier; each row also gets a tiny image file (colour = class, its own noise: the copy check tells them
    apart), the copy the source's very bytes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    embeddings = centres[labels] + 0.35 * rng.normal(size=(len(labels), dim))
    splits = ["train" if i % 3 else "test" for i in range(len(labels))]
    source, copy = 1, 3  # both class 0; row 3 is test
    embeddings[copy] = embeddings[source] + 1e-3 * rng.normal(size=dim)
    outlier = len(labels) - 1
    embeddings[outlier] = -4 * centres.mean(axis=0) + 3 * rng.normal(size=dim)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    true_labels = [f"c{label}" for label in labels]
    given = list(true_labels)
    flipped = np.array([10, 40, 70])
    for row in flipped:
        given[row] = f"c{(labels[row] + 1) % classes}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for row, label in enumerate(labels):
        path = folder / f"{row:04d}.png"
        colour = (60 * label % 256, 90 * label % 256, 200 - 40 * label)
        noise = rng.integers(-40, 41, size=(12, 12, 1))
        image = Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8))
        if row == copy:
            path.write_bytes(paths[source].read_bytes())
        else:
            image.save(path)
        paths.append(path)
    catalogue = Catalogue(paths, given, splits)
    return Planted(catalogue, embeddings.astype(np.float32), (source, copy), flipped, outlier, true_labels)


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    return planted_catalogue(tmp_path / "images")
