"""Write Fashion-MNIST (Debian package `dataset-fashion-mnist`) as PNG files + a dataset CSV.

Closed-set retrieval: the 10 classes are the same in every split. `test` rows are the 10,000
test images (all-vs-all: each queries all the others), `train` rows the training images, and
`val` rows a fixed stratified share (default 10%, chosen with the seed) of the 60,000 training
images, held out of `train` so model selection never sees the test set.

    apt-get install -y dataset-fashion-mnist
    python tools/make_fashion_mnist.py --out /data/fashion_mnist     # dataset.csv + images/
"""

from __future__ import annotations

import argparse
import csv
import gzip
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from retrieval.runtime.files import atomic_write

__all__ = ["IDX_DIR", "main", "read_idx", "stratified_holdout", "write_dataset"]

IDX_DIR = Path("/usr/share/datasets/fashion-mnist")
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_IDX_DTYPES = {0x08: np.uint8}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzipped or not) as an array: `(N,)` labels or `(N, H, W)` images, uint8.

    IDX header: two zero bytes, a dtype code, the number of dimensions, then each size as a
    big-endian int32 (http://yann.lecun.com/exdb/mnist/).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if data[:2] != b"\0\0" or data[2] not in _IDX_DTYPES:
        raise SystemExit(f"error: {path} is not an IDX file of unsigned bytes")
    ndim = data[3]
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    return np.frombuffer(data, dtype=_IDX_DTYPES[data[2]], offset=4 + 4 * ndim).reshape(shape)


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """`(N,)` bool mask: `round(fraction * n_c)` random images of each class c are held out."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        mask[rng.choice(members, size=round(fraction * len(members)), replace=False)] = True
    return mask


def write_dataset(out: Path, idx_dir: Path = IDX_DIR, val_fraction: float = 0.1, seed: int = 0) -> dict[str, int]:
    """Write `out/images/<split>/*.png` and `out/dataset.csv`; returns the number of rows per split."""
    rows = []
    for part, (images_file, labels_file) in _FILES.items():
        if not (idx_dir / images_file).is_file():
            raise SystemExit(f"error: {idx_dir / images_file} not found; apt-get install -y dataset-fashion-mnist")
        images, labels = read_idx(idx_dir / images_file), read_idx(idx_dir / labels_file)
        splits = np.full(len(labels), part, dtype=object)
        if part == "train":
            splits[stratified_holdout(labels, val_fraction, seed)] = "val"
        (out / "images" / part).mkdir(parents=True, exist_ok=True)
        for i in tqdm(range(len(labels)), desc=f"writing {part}", unit="img", file=sys.stderr, mininterval=2):
            name = f"images/{part}/{i:05d}.png"
            Image.fromarray(images[i], mode="L").save(out / name)
            rows.append((name, int(labels[i]), splits[i]))
    with atomic_write(out / "dataset.csv") as temporary, temporary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    return {split: sum(row[2] == split for row in rows) for split in ("train", "val", "test")}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (dataset.csv + images/)")
    parser.add_argument("--idx-dir", type=Path, default=IDX_DIR, help="folder of the four IDX .gz files")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="share of each class's training images")
    parser.add_argument("--seed", type=int, default=0, help="seeds the choice of validation images")
    args = parser.parse_args(argv)
    for split, n in write_dataset(args.out, args.idx_dir, args.val_fraction, args.seed).items():
        print(f"{split}: {n} images")
    print(f"wrote {args.out / 'dataset.csv'}")


if __name__ == "__main__":
    main()
