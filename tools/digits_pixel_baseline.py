"""Recall@K of raw pixels on the digits demo or a dataset CSV's split: the floor a trained embedder must beat.

Each image is flattened, mean-centred (over the split) and L2-normalized; retrieval is the same
exact FAISS search `retrieval evaluate` uses, with the CSV's query/gallery flags when it has them,
and its class-bootstrap intervals; `--per-query` saves the per-query values `retrieval compare` pairs.
Digits are upsampled to 32x32 as in the demo; CSV images are read as `retrieval` reads them
(`load_image`: RGB, or L with `--gray`) and resized to `--size` square, the whole image, no crop.

    python tools/digits_pixel_baseline.py
    python tools/digits_pixel_baseline.py --csv emoji64/dataset.csv --split val --size 64
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from retrieval.data import load_digits_split
from retrieval.data.csv_dataset import read_csv_split
from retrieval.evaluate.evaluator import KS, format_metrics
from retrieval.evaluate.uncertainty import QueryValues, format_uncertainty, save_query_values, uncertainty_summary
from retrieval.images import load_image
from retrieval.metrics import per_query_scores


def main(argv: Sequence[str] | None = None) -> None:
    """Print the Recall@K / MAP@R lines of raw pixels (`--help` says what it does)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, help="a dataset CSV (default: the digits demo's test split)")
    parser.add_argument("--split", choices=("val", "test"), default="test", help="the CSV's split to score")
    parser.add_argument("--size", type=int, default=64, help="CSV images are resized to this square side")
    parser.add_argument("--gray", action="store_true", help="read CSV images as grayscale (L) instead of RGB")
    parser.add_argument("--per-query", type=Path, metavar="FILE.npz", help="write per-query values for `compare`")
    args = parser.parse_args(argv)
    query_mask = gallery_mask = None
    if args.csv is None:
        images, labels = load_digits_split("test", image_size=32)
        pixels = images[:, 0].flatten(1)
        print(f"raw pixels, digits test split ({len(labels)} images):")
    else:
        split = read_csv_split(args.csv, args.split)
        mode = "L" if args.gray else "RGB"
        stacked = np.stack([_pixels(path, mode, args.size) for path in split.paths]).astype(np.float32) / 255
        pixels, labels = torch.from_numpy(stacked).flatten(1), split.labels
        query_mask, gallery_mask = split.query_mask, split.gallery_mask
        print(f"raw pixels, {args.csv} {args.split} split ({len(split.paths)} images, {mode} {args.size} px):")
    scores = per_query_scores(_centred(pixels), labels, KS, query_mask, gallery_mask)
    values = QueryValues.from_scores(scores)
    if args.per_query:
        save_query_values(args.per_query, values)
    print(format_uncertainty(uncertainty_summary(values)))
    print(format_metrics(scores.summary(KS)))


def _centred(pixels: torch.Tensor) -> torch.Tensor:
    """(N, P) pixel rows minus their mean row, L2-normalized: what the inner-product search compares."""
    return F.normalize(pixels - pixels.mean(dim=0), dim=1)


def _pixels(path: Path, mode: str, size: int) -> np.ndarray:
    return np.asarray(load_image(path, mode).resize((size, size), Image.Resampling.BILINEAR))


if __name__ == "__main__":
    main()
