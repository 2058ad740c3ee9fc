"""Shared fixtures: small image datasets written to a temp dir in the generic CSV format."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def write_csv_dataset(root: Path, train_classes: int = 4, test_classes: int = 3, per_class: int = 4) -> Path:
    """Class c is a noisy image of one flat colour; train and test classes are disjoint (zero-shot)."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for split, classes in (("train", range(train_classes)), ("test", range(100, 100 + test_classes))):
        for label in classes:
            colour = rng.integers(0, 256, size=3)
            for i in range(per_class):
                pixels = np.clip(colour + rng.normal(0, 20, size=(40, 40, 3)), 0, 255).astype(np.uint8)
                name = f"images/{split}_{label}_{i}.png"
                Image.fromarray(pixels).save(root / name)
                rows.append({"path": name, "label": f"class{label}" if label % 2 else str(label), "split": split})
    path = root / "dataset.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def csv_dataset(tmp_path: Path) -> Path:
    return write_csv_dataset(tmp_path / "data")
