"""Recall@K of raw pixels on the digits demo's test split: the floor a trained embedder must beat.

Each test image, upsampled to 32x32 as in the demo, is flattened, mean-centred and L2-normalized;
retrieval is the same exact FAISS search `retrieval evaluate` uses.

    python tools/digits_pixel_baseline.py
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch.nn.functional as F

from retrieval.data import load_digits_split
from retrieval.evaluate.evaluator import KS, format_metrics
from retrieval.metrics import retrieval_metrics


def main(argv: Sequence[str] | None = None) -> None:
    """Print the Recall@K / MAP@R lines of raw pixels (the script takes no options; `--help` says what it does)."""
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    images, labels = load_digits_split("test", image_size=32)
    pixels = images[:, 0].flatten(1)
    embeddings = F.normalize(pixels - pixels.mean(dim=0), dim=1)
    print("raw pixels, digits test split (899 images):")
    print(format_metrics(retrieval_metrics(embeddings, labels, KS)))


if __name__ == "__main__":
    main()
