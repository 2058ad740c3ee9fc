"""tools/make_fashion_mnist.py: IDX parsing, the stratified val hold-out, PNGs equal to the source arrays."""

from __future__ import annotations

import csv
import gzip
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.tools.tool_modules import load_tool

fmnist = load_tool("make_fashion_mnist")


def _write_idx(path: Path, array: np.ndarray) -> None:
    """IDX by the format's definition: 0, 0, dtype 0x08, ndim, big-endian sizes, then the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def _fake_idx_dir(root: Path, n_train: int = 40, n_test: int = 10) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    arrays = {}
    for part, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = np.arange(n, dtype=np.uint8) % 2
        images_file, labels_file = fmnist._FILES[part]
        _write_idx(root / images_file, images)
        _write_idx(root / labels_file, labels)
        arrays[part] = (images, labels)
    return arrays


@pytest.mark.parametrize("suffix", [".gz", ""])
def test_read_idx_round_trip(tmp_path: Path, suffix: str) -> None:
    array = np.random.default_rng(1).integers(0, 256, size=(5, 3, 4), dtype=np.uint8)
    _write_idx(tmp_path / f"a.idx{suffix}", array)
    np.testing.assert_array_equal(fmnist.read_idx(tmp_path / f"a.idx{suffix}"), array)


def test_stratified_holdout_takes_the_share_of_every_class() -> None:
    labels = np.repeat(np.arange(3), [10, 20, 30])
    mask = fmnist.stratified_holdout(labels, 0.1, seed=0)
    assert Counter(labels[mask].tolist()) == {0: 1, 1: 2, 2: 3}
    np.testing.assert_array_equal(mask, fmnist.stratified_holdout(labels, 0.1, seed=0))
    assert not np.array_equal(mask, fmnist.stratified_holdout(labels, 0.1, seed=1))


def test_write_dataset_from_idx_files(tmp_path: Path) -> None:
    arrays = _fake_idx_dir(tmp_path / "idx")
    counts = fmnist.write_dataset(tmp_path / "out", tmp_path / "idx", val_fraction=0.25, seed=0)
    assert counts == {"train": 30, "val": 10, "test": 10}
    with (tmp_path / "out" / "dataset.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["path", "label", "split"]
    assert Counter((r["split"], r["label"]) for r in rows if r["split"] == "val") == {("val", "0"): 5, ("val", "1"): 5}
    for row in rows:
        part = "test" if row["split"] == "test" else "train"
        images, labels = arrays[part]
        index = int(Path(row["path"]).stem)
        assert int(row["label"]) == labels[index]
        with Image.open(tmp_path / "out" / row["path"]) as image:
            np.testing.assert_array_equal(np.asarray(image), images[index])


@pytest.mark.skipif(not fmnist.IDX_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_the_debian_package_files() -> None:
    labels = fmnist.read_idx(fmnist.IDX_DIR / fmnist._FILES["test"][1])
    assert labels.shape == (10_000,) and Counter(labels.tolist()) == dict.fromkeys(range(10), 1000)
